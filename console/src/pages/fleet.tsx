// The fleet at a glance: nodes by state, by pool and by rack, and per pool how many nodes
// are booked on each of the next seven days.
import { type Node, type Reservation, type Schemas, api, everyPage, serverNow } from "../api";
import { useLoad } from "../hooks";
import { linkProps } from "../router";
import { Badge, Section, Show, Head } from "../ui";

interface FleetData {
  nodes: Node[];
  pools: Schemas["Pool"][];
  reservations: Reservation[];
}

const DAY = 86_400_000;
const BOOKING: Reservation["state"][] = ["pending", "active"];
/** What held nodes on a day: bookings to come or running, and leases that ran and ended. */
const HELD: Reservation["state"][] = ["pending", "active", "ended"];

/** Nodes each pool had or has booked on each day from `back` days ago to `ahead` days on (UTC). */
export function bookedByDay(pools: Schemas["Pool"][], reservations: Reservation[], back: number, ahead: number, now = serverNow()) {
  const today = Math.floor(now / DAY) * DAY;
  const days = Array.from({ length: back + ahead + 1 }, (_, i) => new Date(today + (i - back) * DAY));
  return pools.map((pool) => {
    const booked = days.map((day) => {
      const from = day.getTime();
      const to = from + DAY;
      return reservations
        .filter((r) => r.poolId === pool.id && HELD.includes(r.state))
        .filter((r) => new Date(r.start).getTime() < to && new Date(r.end).getTime() > from)
        .reduce((sum, r) => sum + (r.nodes.length || r.request.gang?.count || 1), 0);
    });
    return { pool, booked, days, today: back };
  });
}

/** Nodes ready for a lease and booked by no reservation in the next seven days. */
export function freeNextWeek(nodes: Node[], reservations: Reservation[], now = serverNow()): Node[] {
  const booked = new Set(
    reservations
      .filter((r) => BOOKING.includes(r.state) && new Date(r.start).getTime() < now + 7 * DAY && new Date(r.end).getTime() > now)
      .flatMap((r) => r.nodes),
  );
  return nodes.filter((n) => n.state === "ready" && !n.maintenance && !n.cordoned && !booked.has(n.id));
}

function countBy<T>(items: T[], key: (t: T) => string): [string, number][] {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(key(item), (counts.get(key(item)) ?? 0) + 1);
  return [...counts.entries()].sort(([a], [b]) => a.localeCompare(b));
}

export function Fleet() {
  const loaded = useLoad<FleetData>(
    async () => ({
      nodes: await everyPage(api.GET("/v1/nodes", {})),
      pools: await everyPage(api.GET("/v1/pools")),
      reservations: await everyPage(api.GET("/v1/reservations")),
    }),
    [],
    (e) => e.subject.startsWith("node/") || e.subject.startsWith("reservation/") || e.subject.startsWith("pool/"),
  );
  return (
    <main id="main">
      <h1>Fleet</h1>
      <Show loaded={loaded}>
        {({ nodes, pools, reservations }) => (
          <>
            <Section title="Nodes by state">
              <ul class="counts" aria-label="nodes by state">
                {countBy(nodes, (n) => n.state).map(([state, count]) => (
                  <li key={state} data-state={state}>
                    <Badge value={state} /> <strong>{count}</strong>
                  </li>
                ))}
                <li>
                  <span class="badge">maintenance</span> <strong>{nodes.filter((n) => n.maintenance).length}</strong>
                </li>
              </ul>
            </Section>
            <Section title="Pools">
              <table>
                <caption class="sr-only">Capacity per pool</caption>
                <Head columns={["Pool", "Class", "Capacity", "Free", "Leased"]} />
                <tbody>
                  {pools.map((p) => (
                    <tr key={p.id}>
                      <th scope="row">{p.id}</th>
                      <td>{p.class}</td>
                      <td>{p.capacity?.capacity ?? "—"}</td>
                      <td>{p.capacity?.free ?? "—"}</td>
                      <td>{p.capacity?.leased ?? "—"}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </Section>
            <Section title="Booked per day, a week back to a week ahead">
              {bookedByDay(pools, reservations, 7, 7).map(({ pool, booked, days, today }) => {
                const capacity = Math.max(pool.capacity?.capacity ?? 0, ...booked, 1);
                return (
                  <figure key={pool.id} class="week" data-pool={pool.id}>
                    <figcaption>
                      Pool {pool.id}: nodes booked per day, of {pool.capacity?.capacity ?? "?"} (today marked)
                    </figcaption>
                    <ol>
                      {booked.map((n, i) => (
                        <li key={i} class={i === today ? "today" : undefined} aria-label={`${days[i]?.toISOString().slice(0, 10)}: ${n} booked, ${Math.max((pool.capacity?.capacity ?? 0) - n, 0)} free`}>
                          <span class="bar" style={{ height: `${(n / capacity) * 100}%` }} />
                          <span class="day">{days[i]?.toISOString().slice(5, 10)}</span>
                          <span class="value">{n}</span>
                        </li>
                      ))}
                    </ol>
                  </figure>
                );
              })}
            </Section>
            <Section title="Racks">
              <div class="racks">
                {countBy(nodes, (n) => n.labels.rack ?? "no rack").map(([rack, count]) => (
                  <figure key={rack} class="rack" data-rack={rack}>
                    <figcaption>
                      {rack}: {freeNextWeek(nodes, reservations).filter((n) => (n.labels.rack ?? "no rack") === rack).length} of {count}{" "}
                      free all next week
                    </figcaption>
                    <ul>
                      {nodes
                        .filter((n) => (n.labels.rack ?? "no rack") === rack)
                        .map((n) => (
                          <li key={n.id}>
                            <a {...linkProps(`/nodes/${n.id}`)} class={`cell badge-${n.state}`} title={`${n.id}: ${n.state}`}>
                              {n.id}
                            </a>
                          </li>
                        ))}
                    </ul>
                  </figure>
                ))}
              </div>
            </Section>
          </>
        )}
      </Show>
    </main>
  );
}
