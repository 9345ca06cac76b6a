// The lessee's machines: the nodes of its live dedicated-root leases (GET /v1/leases) and
// one machine as its lessee sees it, with power behind a confirmation, the serial console in
// a terminal, the SSH line of the console gateway, and its own events. Nothing here reaches
// the BMC: the scheduler acts through its own session and records who asked.
import { type LeasedNode, type Node, type Session, api, must } from "../api";
import { useLoad } from "../hooks";
import { linkProps } from "../router";
import { Badge, EventList, Head, Section, Show, when } from "../ui";
import { Actions, powerActions } from "./node";
import { ConsoleOpener, ConsoleSessions } from "./terminal";

/** A lessee's view of a node (the API answers an admin the whole record instead). */
function lesseeView(view: Node | LeasedNode): LeasedNode {
  if ("reservationId" in view) return view;
  throw new Error(`node ${view.id}: this page shows a lessee's view; an admin's is under Nodes`);
}

export function Machines() {
  const loaded = useLoad(
    () => must(api.GET("/v1/leases")),
    [],
    (e) => e.subject.startsWith("node/") || e.subject.startsWith("reservation/"),
  );
  return (
    <main id="main">
      <h1>Machines</h1>
      <Show loaded={loaded}>
        {(machines) =>
          machines.length === 0 ? (
            <p class="muted">No leased machines.</p>
          ) : (
            <table data-testid="machines">
              <caption>The machines of your live leases</caption>
              <Head columns={["Machine", "State", "Power", "Lease", "Ends", "Profile"]} />
              <tbody>
                {machines.map((m) => (
                  <tr key={m.id} data-machine={m.id}>
                    <th scope="row">
                      <a {...linkProps(`/machines/${encodeURIComponent(m.id)}`)}>{m.id}</a>
                    </th>
                    <td>
                      <Badge value={m.state} />
                    </td>
                    <td>{m.power}</td>
                    <td>
                      <a {...linkProps(`/reservations/${encodeURIComponent(m.reservationId)}`)}>{m.reservationId}</a>
                    </td>
                    <td>{when(m.leaseEnd)}</td>
                    <td>{m.profileId ? `${m.profileId}:${m.profileVersion ?? "?"}` : "—"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )
        }
      </Show>
    </main>
  );
}

/** How to reach the machine's serial console over SSH, when the site runs the gateway. */
function SshLine({ machine, session }: { machine: LeasedNode; session: Session }) {
  if (!session.consoleSshPort) return <p class="muted">This site runs no console SSH gateway.</p>;
  const port = session.consoleSshPort === 22 ? "" : `-p ${session.consoleSshPort} `;
  return (
    <p>
      Over SSH, with a key of your profile or one registered on your tenant:{" "}
      <code data-testid="ssh-line">{`ssh ${port}${machine.reservationId}@${location.hostname}`}</code>
    </p>
  );
}

export function MachinePage({ id, session }: { id: string; session: Session }) {
  const loaded = useLoad(
    async () => lesseeView(await must(api.GET("/v1/nodes/{id}", { params: { path: { id } } }))),
    [id],
    (e) => e.subject === `node/${id}`,
  );
  return (
    <main id="main">
      <p>
        <a {...linkProps("/machines")}>← Machines</a>
      </p>
      <h1>Machine {id}</h1>
      <Show loaded={loaded}>
        {(machine) => (
          <>
            <dl class="facts" data-testid="summary">
              <dt>State</dt>
              <dd data-field="state">
                <Badge value={machine.state} />
              </dd>
              <dt>Power</dt>
              <dd data-field="power">{machine.power}</dd>
              <dt>Lease</dt>
              <dd>
                <a {...linkProps(`/reservations/${encodeURIComponent(machine.reservationId)}`)}>{machine.reservationId}</a> (
                {machine.leaseState}, {when(machine.leaseStart)} to {when(machine.leaseEnd)})
              </dd>
              <dt>Profile</dt>
              <dd>{machine.profileId ? `${machine.profileId}:${machine.profileVersion ?? "?"}` : "—"}</dd>
              <dt>Devices</dt>
              <dd>{machine.devices.map((d) => `${d.id}${d.healthy ? "" : " (unhealthy)"}`).join(", ") || "—"}</dd>
            </dl>
            <Actions id={id} actions={powerActions(id)} done={loaded.reload} />
            <Section title="Serial console">
              <ConsoleOpener id={id} />
              <SshLine machine={machine} session={session} />
              <ConsoleSessions id={id} />
            </Section>
            <Section title="Events">
              {machine.events.length === 0 ? <p class="muted">No events of yours yet.</p> : <EventList events={machine.events} testId="events" />}
            </Section>
          </>
        )}
      </Show>
    </main>
  );
}
