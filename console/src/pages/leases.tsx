// Leases: a Gantt per node of reservations, teardowns and maintenance, the reservations
// list, and one reservation with its events and meter records. A tenant member sees only
// its own reservations (the API shows it nothing else).
import { type Node, type Reservation, type Schemas, type Session, api, everyPage, must, serverNow } from "../api";
import { useLoad } from "../hooks";
import { linkProps } from "../router";
import { Badge, Section, Show, when, Head, EventList } from "../ui";
import { eventsOf } from "./node";

interface Bar {
  kind: "reservation" | "teardown" | "maintenance";
  label: string;
  from: number;
  to: number;
  link?: string;
}

interface Row {
  name: string;
  bars: Bar[];
}

const time = (s: string) => new Date(s).getTime();

/** Rows of the Gantt: one per node booked (or per reservation not yet bound). */
export function ganttRows(reservations: Reservation[], teardowns: Map<string, Schemas["WorkflowRun"][]>, nodes: Node[], now: number): Row[] {
  const rows = new Map<string, Bar[]>();
  const row = (name: string) => rows.get(name) ?? rows.set(name, []).get(name)!;
  for (const r of reservations) {
    const bar: Bar = { kind: "reservation", label: `${r.id} (${r.tenantId}, ${r.state})`, from: time(r.start), to: time(r.end), link: `/reservations/${r.id}` };
    if (r.nodes.length === 0) row(`(${r.id})`).push(bar);
    for (const n of r.nodes) row(n).push(bar);
  }
  for (const [node, runs] of teardowns)
    for (const run of runs)
      row(node).push({ kind: "teardown", label: `${run.id} (${run.status})`, from: time(run.createdAt), to: run.finishedAt ? time(run.finishedAt) : now });
  for (const n of nodes.filter((n) => n.maintenance)) row(n.id).push({ kind: "maintenance", label: "maintenance", from: time(n.updatedAt), to: now });
  return [...rows.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([name, bars]) => ({ name, bars }));
}

/** The Gantt's window: a week back to two weeks ahead, so old leases do not squeeze it. */
const BEFORE = 7 * 86_400_000;
const AHEAD = 14 * 86_400_000;

function Gantt({ rows, now }: { rows: Row[]; now: number }) {
  const from = now - BEFORE;
  const to = now + AHEAD;
  const shown = rows
    .map((r) => ({ ...r, bars: r.bars.filter((b) => b.to > from && b.from < to) }))
    .filter((r) => r.bars.length > 0);
  if (shown.length === 0) return <p class="muted">Nothing booked from a week ago to two weeks ahead.</p>;
  const clip = (t: number) => Math.min(Math.max(t, from), to);
  const x = (t: number) => `${(((clip(t) - from) / (to - from)) * 100).toFixed(3)}%`;
  const w = (b: Bar) => `${Math.max(((clip(b.to) - clip(b.from)) / (to - from)) * 100, 0.4).toFixed(3)}%`;
  return (
    <div class="gantt" role="group" aria-label={`timeline from ${new Date(from).toISOString()} to ${new Date(to).toISOString()}`}>
      <div class="gantt-axis">
        <span>{when(new Date(from).toISOString())}</span>
        <span>{when(new Date(to).toISOString())}</span>
      </div>
      {shown.map((row) => (
        <div class="gantt-row" key={row.name}>
          <span class="gantt-name">{row.name}</span>
          <span class="gantt-track">
            <span class="gantt-now" style={{ left: x(now) }} aria-hidden="true" />
            {row.bars.map((b, i) =>
              b.link ? (
                <a key={i} {...linkProps(b.link)} class={`gantt-bar gantt-${b.kind}`} style={{ left: x(b.from), width: w(b) }} title={b.label} aria-label={`${b.kind} ${b.label}`} />
              ) : (
                <span key={i} class={`gantt-bar gantt-${b.kind}`} style={{ left: x(b.from), width: w(b) }} title={b.label} aria-label={`${b.kind} ${b.label}`} role="img" />
              ),
            )}
          </span>
        </div>
      ))}
      <p class="legend">
        <span class="gantt-bar gantt-reservation" /> reservation <span class="gantt-bar gantt-teardown" /> teardown{" "}
        <span class="gantt-bar gantt-maintenance" /> maintenance
      </p>
    </div>
  );
}

export function Leases({ session }: { session: Session }) {
  const admin = session.role === "platform-admin";
  const loaded = useLoad(
    async () => {
      const reservations = await everyPage(api.GET("/v1/reservations"));
      const nodes = admin ? await everyPage(api.GET("/v1/nodes", {})) : [];
      const teardowns = new Map<string, Schemas["WorkflowRun"][]>();
      if (admin)
        for (const id of new Set(reservations.flatMap((r) => r.nodes)))
          teardowns.set(id, await must(api.GET("/v1/nodes/{id}/teardowns", { params: { path: { id } } })));
      return { reservations, nodes, teardowns };
    },
    [admin],
    (e) => e.subject.startsWith("reservation/") || e.subject.startsWith("node/"),
  );
  const now = serverNow();
  return (
    <main id="main">
      <h1>Leases</h1>
      <Show loaded={loaded}>
        {({ reservations, nodes, teardowns }) => (
          <>
            <Section title="Timeline">
              <Gantt rows={ganttRows(reservations, teardowns, nodes, now)} now={now} />
            </Section>
            <Section title="Reservations">
              {reservations.length === 0 ? (
                <p class="muted">No reservations.</p>
              ) : (
                <div class="scroll">
                  <table data-testid="reservations">
                    <Head columns={["Reservation", "Tenant", "State", "Pool", "Nodes", "Start", "End"]} />
                    <tbody>
                      {[...reservations].reverse().map((r) => (
                        <tr key={r.id} data-reservation={r.id}>
                          <th scope="row">
                            <a {...linkProps(`/reservations/${r.id}`)}>{r.id}</a>
                          </th>
                          <td>{r.tenantId}</td>
                          <td>
                            <Badge value={r.state} />
                          </td>
                          <td>{r.poolId}</td>
                          <td>{r.nodes.join(", ") || "—"}</td>
                          <td>{when(r.start)}</td>
                          <td>{when(r.end)}</td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
              )}
            </Section>
          </>
        )}
      </Show>
    </main>
  );
}

export function ReservationPage({ id, session }: { id: string; session: Session }) {
  const loaded = useLoad(
    async () => {
      const reservation = await must(api.GET("/v1/reservations/{id}", { params: { path: { id } } }));
      const usage = await must(api.GET("/v1/usage", { params: { query: { tenantId: reservation.tenantId } } }));
      return { reservation, events: await eventsOf(`reservation/${id}`), records: usage.records.filter((r) => r.reservationId === id) };
    },
    [id],
    (e) => e.subject === `reservation/${id}`,
  );
  return (
    <main id="main">
      <p>
        <a {...linkProps("/leases")}>← Leases</a>
      </p>
      <h1>Reservation {id}</h1>
      <Show loaded={loaded}>
        {({ reservation: r, events, records }) => (
          <>
            <dl class="facts">
              <dt>State</dt>
              <dd>
                <Badge value={r.state} /> {r.stateReason ?? ""}
              </dd>
              <dt>Tenant</dt>
              <dd>{r.tenantId}</dd>
              <dt>Pool</dt>
              <dd>{r.poolId}</dd>
              <dt>Window</dt>
              <dd>
                {when(r.start)} to {when(r.end)}
              </dd>
              <dt>Bound</dt>
              <dd>{when(r.boundAt)}</dd>
              <dt>Nodes</dt>
              <dd>
                {r.nodes.length === 0
                  ? "—"
                  : r.nodes.map((n) =>
                      session.role === "platform-admin" ? (
                        <a key={n} {...linkProps(`/nodes/${n}`)}>
                          {n}{" "}
                        </a>
                      ) : (
                        <span key={n}>{n} </span>
                      ),
                    )}
              </dd>
            </dl>
            <Section title="Meter records">
              {records.length === 0 ? (
                <p class="muted">None yet.</p>
              ) : (
                <table data-testid="meter">
                  <Head columns={["Meter", "Window", "Quantity"]} />
                  <tbody>
                    {records.map((m) => (
                      <tr key={m.id}>
                        <th scope="row">{m.meter}</th>
                        <td>
                          {when(m.windowStart)} to {when(m.windowEnd)}
                        </td>
                        <td>{m.quantity.toFixed(3)}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              )}
            </Section>
            <Section title="Events">
              <EventList events={events} />
            </Section>
          </>
        )}
      </Show>
    </main>
  );
}
