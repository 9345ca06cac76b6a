// The live event stream: GET /v1/events/stream (Server-Sent Events) read through fetch, so
// the token travels in the Authorization header as for every other call (EventSource
// cannot send one). Reconnects after a drop from the last event seen.
import { type MetalEvent, authorization, api, must } from "./api";

type Listener = (event: MetalEvent) => void;
type Status = "connecting" | "live" | "reconnecting";

const listeners = new Set<Listener>();
const statusListeners = new Set<(s: Status) => void>();
let started: AbortController | null = null;

/** Calls `listener` with every event from now on; returns the unsubscribe. */
export function onEvent(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Calls `listener` whenever the stream's status changes; returns the unsubscribe. */
export function onStatus(listener: (s: Status) => void): () => void {
  statusListeners.add(listener);
  return () => statusListeners.delete(listener);
}

function announce(status: Status) {
  for (const l of statusListeners) l(status);
}

/** The sequence number of the newest event now (the stream starts after it). */
async function newest(): Promise<number> {
  return (await must(api.GET("/v1/events", { params: { query: { tail: true } } }))).next;
}

/** Starts the stream (once per sign-in); `stop` ends it. */
export function start() {
  if (started) return;
  const controller = new AbortController();
  started = controller;
  void run(controller.signal);
}

export function stop() {
  started?.abort();
  started = null;
}

async function run(signal: AbortSignal) {
  let after: number | null = null;
  let delay = 500;
  while (!signal.aborted) {
    try {
      announce(after === null ? "connecting" : "reconnecting");
      if (after === null) after = await newest();
      const response = await fetch(`/v1/events/stream?after=${after}`, {
        headers: { ...authorization(), Accept: "text/event-stream" },
        signal,
      });
      if (!response.ok || !response.body) throw new Error(`stream answered ${response.status}`);
      announce("live");
      delay = 500;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end: number;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = block
            .split("\n")
            .filter((line) => line.startsWith("data:"))
            .map((line) => line.slice(5).trimStart())
            .join("\n");
          if (!data) continue;
          const event = JSON.parse(data) as MetalEvent;
          after = Math.max(after ?? 0, event.seq);
          for (const l of listeners) l(event);
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      console.warn("event stream:", e instanceof Error ? e.message : e);
    }
    announce("reconnecting");
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10_000);
  }
}
