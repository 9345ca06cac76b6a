// Small pieces every page uses: loading and error states, badges, times, the confirmation
// dialog that names what it acts on.
import type { ComponentChildren } from "preact";
import { useLayoutEffect, useRef } from "preact/hooks";
import type { MetalEvent } from "./api";
import type { Loaded } from "./hooks";

export function Show<T>({ loaded, children }: { loaded: Loaded<T>; children: (data: T) => ComponentChildren }) {
  if (loaded.error !== undefined)
    return (
      <p class="error" role="alert">
        {loaded.error}
      </p>
    );
  if (loaded.data === undefined) return <p class="muted" aria-live="polite">Loading…</p>;
  return <>{children(loaded.data)}</>;
}

export function Badge({ value, kind }: { value: string; kind?: string }) {
  return <span class={`badge badge-${kind ?? value}`}>{value}</span>;
}

export function when(at: string | null | undefined): string {
  if (!at) return "—";
  const d = new Date(at);
  return Number.isNaN(d.getTime()) ? at : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function duration(from: string, to: string | null | undefined): string {
  if (!to) return "—";
  const ms = new Date(to).getTime() - new Date(from).getTime();
  if (!(ms >= 0)) return "—";
  const s = ms / 1000;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  if (s < 172_800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86_400).toFixed(1)} d`;
}

/** A modal confirmation: `title` names the action and its target, Escape or Cancel closes. */
export function Confirm(props: {
  open: boolean;
  title: string;
  detail?: string;
  confirm: string;
  danger?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
}) {
  const dialog = useRef<HTMLDialogElement>(null);
  // Opened as soon as it renders: no keypress lands on the page between the click and it.
  useLayoutEffect(() => {
    const d = dialog.current;
    if (!d) return;
    if (props.open && !d.open) d.showModal();
    if (!props.open && d.open) d.close();
  }, [props.open]);
  return (
    <dialog
      ref={dialog}
      aria-labelledby="confirm-title"
      aria-describedby={props.detail ? "confirm-detail" : undefined}
      onCancel={(e) => {
        // Escape: close through our state, as Cancel does.
        e.preventDefault();
        props.onCancel();
      }}
    >
      <h2 id="confirm-title">{props.title}</h2>
      {props.detail && <p id="confirm-detail">{props.detail}</p>}
      <div class="actions">
        <button type="button" onClick={props.onCancel} autofocus>
          Cancel
        </button>
        <button type="button" class={props.danger ? "danger" : "primary"} onClick={props.onConfirm}>
          {props.confirm}
        </button>
      </div>
    </dialog>
  );
}

export function Section({ title, children }: { title: string; children: ComponentChildren }) {
  const id = `section-${title.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
  return (
    <section aria-labelledby={id}>
      <h2 id={id}>{title}</h2>
      {children}
    </section>
  );
}

/** A table's header row: one column header per name. */
export function Head({ columns }: { columns: string[] }) {
  return (
    <thead>
      <tr>
        {columns.map((c) => (
          <th scope="col" key={c}>
            {c}
          </th>
        ))}
      </tr>
    </thead>
  );
}

/** Events newest first, each with its time, kind and data. */
export function EventList({ events, testId }: { events: MetalEvent[]; testId?: string }) {
  return (
    <ol class="timeline" data-testid={testId}>
      {[...events].reverse().map((e) => (
        <li key={e.seq}>
          <time dateTime={e.at}>{when(e.at)}</time> <strong>{e.kind}</strong> <span class="detail">{JSON.stringify(e.data)}</span>
        </li>
      ))}
    </ol>
  );
}
