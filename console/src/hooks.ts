// Loading API data into a page, and loading it again when the live stream says it changed.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import type { MetalEvent } from "./api";
import { onEvent } from "./live";

export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  reload: () => void;
}

/** Runs `load` now, whenever `deps` change, and after events that `touches` picks. One load
 * runs at a time: what asks for a reload while one runs gets one more load after it (never
 * a load thrown away for a newer one, which under a steady stream of events would never
 * finish). */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[], touches?: (e: MetalEvent) => boolean): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const state = useRef({ running: false, again: false, current: 0 });
  const reload = useCallback(() => {
    const s = state.current;
    if (s.running) {
      s.again = true;
      return;
    }
    s.running = true;
    const mine = s.current;
    const done = () => {
      s.running = false;
      if (s.again && s === state.current) {
        s.again = false;
        reload();
      }
    };
    load().then(
      (d) => {
        if (mine === s.current) {
          setData(d);
          setError(undefined);
        }
        done();
      },
      (e: unknown) => {
        if (mine === s.current) setError(e instanceof Error ? e.message : String(e));
        done();
      },
    );
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  useEffect(() => {
    // New deps: what was shown belonged to the old ones, and a load still running for them
    // is not shown when it ends.
    state.current = { running: false, again: false, current: state.current.current + 1 };
    setData(undefined);
    setError(undefined);
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
