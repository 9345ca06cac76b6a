// Routing inside /console/ by the history API: links push a path, the back button pops it.
import { useEffect, useState } from "preact/hooks";

export const BASE = "/console";

export function navigate(path: string) {
  history.pushState(null, "", BASE + path);
  dispatchEvent(new PopStateEvent("popstate"));
}

/** The path under /console (always starting with "/"). */
export function usePath(): string {
  const read = () => location.pathname.slice(BASE.length) || "/";
  const [path, setPath] = useState(read);
  useEffect(() => {
    const update = () => setPath(read());
    addEventListener("popstate", update);
    return () => removeEventListener("popstate", update);
  }, []);
  return path;
}

/** A link inside the console. */
export function linkProps(path: string) {
  return {
    href: BASE + path,
    onClick: (e: MouseEvent) => {
      if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
      e.preventDefault();
      navigate(path);
    },
  };
}
