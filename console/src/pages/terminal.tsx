// The node's serial console (IPMI Serial-over-LAN through the scheduler's WebSocket bridge)
// in an xterm.js terminal, and the audit list of its sessions. The token travels as a
// WebSocket subprotocol (a browser cannot send an Authorization header there).
import type { Terminal as XTerm } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "preact/hooks";
import { api, must, token } from "../api";
import { useLoad } from "../hooks";
import { Section, Show, when, Head } from "../ui";

function base64url(text: string): string {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Ctrl+] leaves the terminal for the page (xterm.js takes Tab and Escape for the machine). */
const LEAVE = "Ctrl+]";

export function Terminal({ id, onClose }: { id: string; onClose: () => void }) {
  const element = useRef<HTMLDivElement>(null);
  const close = useRef<HTMLButtonElement>(null);
  const [status, setStatus] = useState("connecting");
  useEffect(() => {
    let stop: (() => void) | null = null;
    let cancelled = false;
    // xterm.js is most of the console's code: it loads only when a terminal opens.
    import("@xterm/xterm")
      .then((module) => {
        // xterm.js is CommonJS: its exports arrive as the default of a dynamic import.
        const { Terminal } = (module as unknown as { default?: typeof module }).default ?? module;
        if (cancelled || !element.current) return;
        stop = connect(element.current, new Terminal({ fontSize: 13, rows: 24, cols: 80, screenReaderMode: true }));
      })
      .catch((e: unknown) => {
        console.error("opening the terminal:", e);
        setStatus("failed to open the terminal");
      });
    return () => {
      cancelled = true;
      stop?.();
    };
  }, [id]);

  function connect(into: HTMLDivElement, term: XTerm): () => void {
    term.open(into);
    term.attachCustomKeyEventHandler((e) => {
      if (e.type === "keydown" && e.ctrlKey && e.key === "]") {
        close.current?.focus();
        return false;
      }
      return true;
    });
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/v1/nodes/${encodeURIComponent(id)}/console`, [
      "metal.console",
      `metal.bearer.${base64url(token() ?? "")}`,
    ]);
    socket.binaryType = "arraybuffer";
    socket.onopen = () => {
      setStatus("connected");
      term.focus();
    };
    socket.onmessage = (e) => term.write(new Uint8Array(e.data as ArrayBuffer));
    socket.onclose = () => setStatus((s) => (s === "connecting" ? "refused" : "closed"));
    const typed = term.onData((data) => {
      if (socket.readyState === WebSocket.OPEN) socket.send(new TextEncoder().encode(data));
    });
    return () => {
      typed.dispose();
      socket.close();
      term.dispose();
    };
  }
  return (
    <div class="terminal">
      <p role="status" data-testid="console-status">
        Serial console of {id}: {status}. {LEAVE} leaves the terminal.{" "}
        <button type="button" ref={close} onClick={onClose}>
          Close the console
        </button>
      </p>
      <div ref={element} data-testid="terminal" />
    </div>
  );
}

/** The button that opens node `id`'s terminal, and the terminal while it is open; focus
 * comes back to the button when it closes. */
export function ConsoleOpener({ id }: { id: string }) {
  const [open, setOpen] = useState(false);
  const opener = useRef<HTMLButtonElement>(null);
  const closed = useRef(false);
  useEffect(() => {
    // Back on the button that opened it once the terminal closes.
    if (!open && closed.current) opener.current?.focus();
  }, [open]);
  return open ? (
    <Terminal
      id={id}
      onClose={() => {
        closed.current = true;
        setOpen(false);
      }}
    />
  ) : (
    <button type="button" ref={opener} onClick={() => setOpen(true)}>
      Open the serial console
    </button>
  );
}

/** The audit of node `id`'s console sessions (a lessee sees those since its lease started). */
export function ConsoleSessions({ id }: { id: string }) {
  const sessions = useLoad(
    () => must(api.GET("/v1/nodes/{id}/console/sessions", { params: { path: { id } } })),
    [id],
    (e) => e.subject === `node/${id}` && (e.kind.startsWith("node.console") || e.kind === "lessee.console"),
  );
  return (
    <Show loaded={sessions}>
      {(list) =>
        list.length === 0 ? (
          <p class="muted">No console sessions yet.</p>
        ) : (
          <table data-testid="console-sessions">
            <caption>Console sessions (audit)</caption>
            <Head columns={["Session", "Credential", "Opened", "Closed", "Bytes in / out"]} />
            <tbody>
              {list.map((s) => (
                <tr key={s.id}>
                  <th scope="row">{s.id}</th>
                  <td>{s.credentialId}</td>
                  <td>{when(s.startedAt)}</td>
                  <td>{when(s.endedAt)}</td>
                  <td>
                    {s.bytesIn} / {s.bytesOut}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )
      }
    </Show>
  );
}

export function SerialConsole({ id }: { id: string }) {
  const bmc = useLoad(() => must(api.GET("/v1/nodes/{id}/bmc", { params: { path: { id } } })), [id]);
  return (
    <Section title="Serial console">
      <Show loaded={bmc}>
        {(info) =>
          info.protocol !== "ipmi" ? (
            <p class="muted">The serial console needs an IPMI BMC (Serial-over-LAN); this node's BMC speaks {info.protocol}.</p>
          ) : (
            <ConsoleOpener id={id} />
          )
        }
      </Show>
      <ConsoleSessions id={id} />
    </Section>
  );
}
