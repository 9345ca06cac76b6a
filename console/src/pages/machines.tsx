// The lessee's machines: the nodes of its live dedicated-root leases (GET /v1/leases) and
// one machine as its lessee sees it, with power, a rescue and a reinstall behind a confirmation, the
// serial console in a terminal, the SSH line of the console gateway, and its own events. Nothing here reaches
// the BMC: the scheduler acts through its own session and records who asked.
import { useState } from "preact/hooks";
import { type LeasedNode, type Node, type Profile, type Session, api, everyPage, must } from "../api";
import { useLoad } from "../hooks";
import { linkProps } from "../router";
import { Badge, EventList, Head, Section, Show, when } from "../ui";
import { type Action, Actions, powerActions } from "./node";
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

/** Every version of the profiles the tenant may deploy (its own and public ones), newest
 * first within a profile, as `PROFILE:VERSION`. */
function versionsOf(profiles: Profile[]): string[] {
  return profiles.flatMap((p) => [...p.versions].reverse().map((v) => `${p.id}:${v.version}`));
}

/** The reinstall of machine `id` with `choice` (`PROFILE:VERSION`). */
function reinstallAction(id: string, choice: string): Action {
  const [profileId = "", version = "0"] = choice.split(/:(?=[^:]*$)/);
  return {
    key: "reinstall",
    label: "Reinstall",
    title: `Reinstall ${id} with ${choice}?`,
    detail: "Everything on its disks is replaced by a fresh deploy of that version; the machine keeps its lease, under a new identity.",
    danger: true,
    run: () => must(api.POST("/v1/nodes/{id}/reinstall", { params: { path: { id } }, body: { profileId, profileVersion: Number(version) } })),
  };
}

/** A rescue of `machine`, or, when it is in one, booting its disk again. */
function rescueAction(machine: LeasedNode): Action {
  const id = machine.id;
  if (machine.state === "rescue") {
    return {
      key: "unrescue",
      label: "Boot the disk again",
      title: `Leave the rescue of ${id}?`,
      detail: "The machine powers off and boots its disk on your network; what lives only in the rescue's memory is gone.",
      run: () => must(api.POST("/v1/nodes/{id}/unrescue", { params: { path: { id } } })),
    };
  }
  return {
    key: "rescue",
    label: "Rescue",
    title: `Boot ${id} into the rescue environment?`,
    detail:
      "The machine powers off and boots a rescue ramdisk on your network: root over SSH with your keys, sshd and the repair tools, your disks untouched. Its address and SSH host keys show on the serial console.",
    danger: true,
    run: () => must(api.POST("/v1/nodes/{id}/rescue", { params: { path: { id } } })),
  };
}

/** Power, a rescue (or leaving one) and, once a profile version is chosen, a reinstall. */
function MachineActions({ machine, done }: { machine: LeasedNode; done: () => void }) {
  const profiles = useLoad(() => everyPage(api.GET("/v1/profiles")), []);
  const current = machine.profileId ? `${machine.profileId}:${machine.profileVersion ?? ""}` : "";
  const [choice, setChoice] = useState(current);
  const choices = profiles.data ? versionsOf(profiles.data) : current ? [current] : [];
  const actions = [
    ...powerActions(machine.id),
    rescueAction(machine),
    ...(choice ? [reinstallAction(machine.id, choice)] : []),
  ];
  return (
    <Actions id={machine.id} actions={actions} done={done}>
      <p>
        <label>
          Reinstall with{" "}
          <select data-testid="reinstall-version" value={choice} onChange={(e) => setChoice(e.currentTarget.value)}>
            {choices.map((c) => (
              <option key={c} value={c}>
                {c}
                {c === current ? " (deployed)" : ""}
              </option>
            ))}
          </select>
        </label>
      </p>
    </Actions>
  );
}

/** In a rescue: where the lessee finds its address and how it logs in. */
function RescueLine({ machine }: { machine: LeasedNode }) {
  if (machine.state !== "rescue") return null;
  return (
    <p data-testid="rescue-line">
      In the rescue environment: it takes its address from your network's DHCP and prints it, with its SSH host key
      fingerprints, on the serial console; log in with <code>ssh root@ADDRESS</code> and a key of your profile or tenant.
    </p>
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
            <MachineActions machine={machine} done={loaded.reload} />
            <RescueLine machine={machine} />
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
