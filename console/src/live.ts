// The live event stream: GET /v1/events/stream (Server-Sent Events) read through fetch, so
// the token travels in the Authorization header as for every other call (EventSource
// cannot send one). Reconnects after a drop from the last event seen; a token the API no
// longer accepts ends the stream and the session; a resume from before the event retention
// (410) reloads the console.
import { ApiFailure, type MetalEvent, api, authorization, must } from "./api";

type Listener = (event: MetalEvent) => void;
type Status = "connecting" | "live" | "reconnecting" | "signed out";

const listeners = new Set<Listener>();
const statusListeners = new Set<(s: Status) => void>();
let started: AbortController | null = null;
let current: Status = "connecting";

/** Calls `listener` with every event from now on; returns the unsubscribe. */
export function onEvent(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Calls `listener` with the stream's status now and whenever it changes; returns the
 * unsubscribe. (A component mounted after the stream went live still shows it live: its
 * effect, which subscribes, may run well after the stream connected.) */
export function onStatus(listener: (s: Status) => void): () => void {
  statusListeners.add(listener);
  listener(current);
  return () => statusListeners.delete(listener);
}

function announce(status: Status) {
  current = status;
  for (const l of statusListeners) l(status);
}

function deliver(event: MetalEvent) {
  for (const l of listeners) {
    try {
      l(event);
    } catch (e) {
      console.warn("an event listener failed:", e);
    }
  }
}

/** Starts the stream (once per sign-in); `stop` ends it. */
export function start() {
  if (started) return;
  const controller = new AbortController();
  started = controller;
  announce("connecting");
  void run(controller.signal);
}

export function stop() {
  started?.abort();
  started = null;
}

/** Splits Server-Sent Events text into the data of each complete event, and the rest (an
 * event not yet ended) for the next chunk. Lines may end in CRLF, LF or CR. */
export function parseEvents(buffer: string): { data: string[]; rest: string } {
  // A trailing CR may be the first half of a CRLF: keep it for the next chunk.
  const pending = buffer.endsWith("\r") ? "\r" : "";
  const text = (pending ? buffer.slice(0, -1) : buffer).replace(/\r\n|\r/g, "\n");
  const blocks = text.split("\n\n");
  const rest = blocks.pop() ?? "";
  const data = blocks
    .map((block) =>
      block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n"),
    )
    .filter((d) => d !== "");
  return { data, rest: rest + pending };
}

async function run(signal: AbortSignal) {
  let after: number | null = null;
  let delay = 500;
  while (!signal.aborted) {
    let reader: ReadableStreamDefaultReader<string> | undefined;
    try {
      announce(after === null ? "connecting" : "reconnecting");
      if (after === null) after = (await must(api.GET("/v1/events", { params: { query: { tail: true } } }))).next;
      const response = await fetch(`/v1/events/stream?after=${after}`, {
        headers: { ...authorization(), Accept: "text/event-stream" },
        signal,
      });
      if (!response.ok || !response.body) throw new ApiFailure(response.status, `the stream answered ${response.status}`);
      announce("live");
      delay = 500;
      reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const parsed = parseEvents(buffer + value);
        buffer = parsed.rest;
        for (const data of parsed.data) {
          const event = JSON.parse(data) as MetalEvent;
          after = Math.max(after ?? 0, event.seq);
          deliver(event);
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiFailure && e.status === 401) {
        announce("signed out");
        stop();
        return;
      }
      if (e instanceof ApiFailure && e.status === 410) {
        // Away longer than the event retention: what was missed is gone, so the pages load
        // again from the API and the stream starts from now.
        location.reload();
        return;
      }
      console.warn("event stream:", e instanceof Error ? e.message : e);
    } finally {
      reader?.cancel().catch(() => {});
    }
    announce("reconnecting");
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10_000);
  }
}
