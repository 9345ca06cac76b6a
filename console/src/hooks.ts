// Loading API data into a page, and loading it again when the live stream says it changed.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import type { MetalEvent } from "./api";
import { onEvent } from "./live";

export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  reload: () => void;
}

/** Runs `load` now, whenever `deps` change, and after events that `touches` picks (at most
 * one reload per 250 ms while events keep coming). */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[], touches?: (e: MetalEvent) => boolean): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const generation = useRef(0);
  const reload = useCallback(() => {
    const mine = ++generation.current;
    load().then(
      (d) => {
        if (mine !== generation.current) return;
        setData(d);
        setError(undefined);
      },
      (e: unknown) => {
        if (mine !== generation.current) return;
        setError(e instanceof Error ? e.message : String(e));
      },
    );
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  useEffect(() => {
    setData(undefined);
    reload();
  }, [reload]);
  useEffect(() => {
    if (!touches) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const off = onEvent((e) => {
      if (!touches(e) || timer) return;
      timer = setTimeout(() => {
        timer = undefined;
        reload();
      }, 250);
    });
    return () => {
      off();
      if (timer) clearTimeout(timer);
    };
  }, [reload]);
  return { data, error, reload };
}
