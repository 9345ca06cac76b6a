// One node: what it is, what it did, and the admin actions on it, each behind a
// confirmation that names the node.
import { type ComponentChildren, Fragment } from "preact";
import { useRef, useState } from "preact/hooks";
import { ApiFailure, type MetalEvent, type Node, type Schemas, adminView, api, must } from "../api";
import { useLoad } from "../hooks";
import { linkProps } from "../router";
import { Badge, Confirm, Section, Show, duration, when, Head, EventList } from "../ui";
import { SerialConsole } from "./terminal";

/** Every event about `subject`, oldest first. */
export async function eventsOf(subject: string): Promise<MetalEvent[]> {
  const found: MetalEvent[] = [];
  let after = 0;
  for (;;) {
    const page = await must(api.GET("/v1/events", { params: { query: { after, subject } } }));
    if (page.events.length === 0) return found;
    found.push(...page.events);
    after = page.next;
  }
}

export interface Action {
  /** Stable across label changes (Maintenance / End maintenance), so focus can return. */
  key: string;
  label: string;
  title: string;
  detail: string;
  danger?: boolean;
  run: () => Promise<unknown>;
}

/** Power on, off and cycle of node `id` (an admin's on any node, a lessee's on its own). */
export function powerActions(id: string): Action[] {
  const power = (action: Schemas["PowerAction"], label: string, detail: string, danger = false): Action => ({
    key: `power-${action}`,
    label,
    title: `${label} ${id}?`,
    detail,
    danger,
    run: () => must(api.POST("/v1/nodes/{id}/power", { params: { path: { id } }, body: { action } })),
  });
  return [
    power("on", "Power on", "The BMC powers the machine on and reads the state back."),
    power("off", "Power off", "The BMC cuts power now; whatever runs on the machine stops.", true),
    power("cycle", "Power cycle", "Off, then on again; whatever runs on the machine stops.", true),
  ];
}

function actionsFor(node: Node): Action[] {
  const id = node.id;
  const path = { params: { path: { id } } };
  const patch = (body: Schemas["NodePatch"]) =>
    must(api.PATCH("/v1/nodes/{id}", { ...path, body: { ...body, generation: node.generation } }));
  return [
    ...powerActions(id),
    {
      key: "boot",
      label: "Boot from network",
      title: `Boot ${id} from the network next time?`,
      detail: "A one-time boot override to PXE.",
      run: () => must(api.POST("/v1/nodes/{id}/boot", { ...path, body: { target: "pxe", persistent: false } })),
    },
    node.maintenance
      ? { key: "maintenance", label: "End maintenance", title: `Take ${id} out of maintenance?`, detail: "", run: () => patch({ maintenance: false }) }
      : {
          key: "maintenance",
          label: "Maintenance",
          title: `Put ${id} in maintenance?`,
          detail: "It takes no new leases until taken out.",
          run: () => patch({ maintenance: true }),
        },
    node.cordoned
      ? { key: "cordon", label: "Uncordon", title: `Uncordon ${id}?`, detail: "", run: () => patch({ cordoned: false }) }
      : { key: "cordon", label: "Cordon", title: `Cordon ${id}?`, detail: "No new placements; leases keep running.", run: () => patch({ cordoned: true }) },
    ...(node.state === "failed"
      ? [
          {
            key: "recover",
            label: "Recover",
            title: `Recover ${id}?`,
            detail: "Runs the teardown again from where it stopped; the node returns only if it ends clean.",
            run: () => must(api.POST("/v1/nodes/{id}/recover", path)),
          },
        ]
      : []),
  ];
}

/** Buttons for `actions` on node `id`, each behind a confirmation that names the node. */
/** The action buttons of node `id`, each behind its confirmation; `children` (a choice an
 * action reads, such as the reinstall's profile version) go above the buttons. */
export function Actions({ id, actions, done, children }: { id: string; actions: Action[]; done: () => void; children?: ComponentChildren }) {
  const [pending, setPending] = useState<Action | null>(null);
  const [outcome, setOutcome] = useState<{ ok: boolean; text: string } | null>(null);
  const buttons = useRef<HTMLDivElement>(null);
  const back = (action: Action | null) => {
    setPending(null);
    // The dialog gave focus back to nothing: put it on the button that opened it.
    if (action) setTimeout(() => buttons.current?.querySelector<HTMLButtonElement>(`[data-action="${action.key}"]`)?.focus());
  };
  return (
    <Section title="Actions">
      {children}
      <div class="buttons" ref={buttons}>
        {actions.map((a) => (
          <button
            type="button"
            key={a.key}
            data-action={a.key}
            class={a.danger ? "danger" : undefined}
            onClick={() => setPending(a)}
          >
            {a.label}
          </button>
        ))}
      </div>
      {outcome && (
        <p class={outcome.ok ? "ok" : "error"} role={outcome.ok ? "status" : "alert"}>
          {outcome.text}
        </p>
      )}
      <Confirm
        open={pending !== null}
        title={pending?.title ?? ""}
        detail={pending?.detail}
        confirm={pending?.label ?? ""}
        danger={pending?.danger}
        onCancel={() => back(pending)}
        onConfirm={() => {
          const action = pending;
          back(action);
          if (!action) return;
          action.run().then(
            () => {
              setOutcome({ ok: true, text: `${action.label}: done on ${id}` });
              done();
            },
            (e: unknown) => setOutcome({ ok: false, text: `${action.label} on ${id}: ${e instanceof Error ? e.message : e}` }),
          );
        }}
      />
    </Section>
  );
}

function Inventory({ id }: { id: string }) {
  const loaded = useLoad(
    () =>
      must(api.GET("/v1/nodes/{id}/inventory", { params: { path: { id } } })).catch((e: unknown) => {
        if (e instanceof ApiFailure && e.status === 404) return null;
        throw e;
      }),
    [id],
  );
  return (
    <Section title="Inventory">
      <Show loaded={loaded}>
        {(inv) => {
          if (inv === null) return <p class="muted">Not commissioned yet: no inventory.</p>;
          const report = inv.inventory as {
            cpu?: { model?: string; threads?: number };
            memory?: { totalBytes?: number };
            disks?: { device?: string; identity?: { serial?: string; model?: string; sizeBytes?: number } }[];
            nics?: { name?: string; mac?: string }[];
            dmi?: Record<string, string | undefined>;
          };
          return (
            <dl class="facts">
              <dt>Reported</dt>
              <dd>
                {when(inv.reportedAt)} ({inv.passed ? "every test passed" : "a test failed"})
              </dd>
              <dt>CPU</dt>
              <dd>
                {report.cpu?.model ?? "?"}, {report.cpu?.threads ?? "?"} threads
              </dd>
              <dt>Memory</dt>
              <dd>{report.memory?.totalBytes ? `${(report.memory.totalBytes / 2 ** 30).toFixed(1)} GiB` : "?"}</dd>
              <dt>Disks</dt>
              <dd>
                <ul>
                  {(report.disks ?? []).map((d) => (
                    <li key={d.device}>
                      {d.device}: {d.identity?.model ?? "?"} serial {d.identity?.serial ?? "?"},{" "}
                      {((d.identity?.sizeBytes ?? 0) / 2 ** 30).toFixed(1)} GiB
                    </li>
                  ))}
                </ul>
              </dd>
              <dt>NICs</dt>
              <dd>{(report.nics ?? []).map((n) => `${n.name ?? "?"} ${n.mac ?? ""}`).join(", ") || "—"}</dd>
              <dt>Firmware</dt>
              <dd>
                BIOS {report.dmi?.biosVersion ?? "?"} ({report.dmi?.systemVendor ?? "?"} {report.dmi?.productName ?? ""})
              </dd>
            </dl>
          );
        }}
      </Show>
    </Section>
  );
}

/** One BMC reading as the API gives it: present with a value, or absent with why. */
interface Reading {
  status?: string;
  value?: unknown;
}

/** A reading's value in one line: scalars as they are, objects as `key value` pairs. */
function summary(value: unknown): string {
  if (value === null || value === undefined) return "";
  if (Array.isArray(value)) return value.length === 0 ? "none" : value.map(summary).join("; ");
  if (typeof value === "object")
    return Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== null && v !== undefined)
      .map(([k, v]) => `${k} ${summary(v)}`)
      .join(", ");
  return String(value);
}

function Readings({ id }: { id: string }) {
  const loaded = useLoad(() => must(api.GET("/v1/nodes/{id}/bmc/readings", { params: { path: { id } } })), [id]);
  return (
    <Section title="BMC readings">
      <Show loaded={loaded}>
        {(readings) => (
          <dl class="facts" data-testid="readings">
            {Object.entries(readings as Record<string, Reading>).map(([name, reading]) => (
              <Fragment key={name}>
                <dt>{name}</dt>
                <dd>
                  {reading?.status === "present" ? summary(reading.value) : <span class="muted">{summary(reading?.value) || "absent"}</span>}
                </dd>
              </Fragment>
            ))}
          </dl>
        )}
      </Show>
    </Section>
  );
}

interface ComponentCheck {
  component?: string;
  expected?: string;
  found?: string | null;
  drift?: boolean;
}

function FirmwareChecks({ id }: { id: string }) {
  const loaded = useLoad(
    () => must(api.GET("/v1/nodes/{id}/firmware-checks", { params: { path: { id } } })),
    [id],
    (e) => e.subject === `node/${id}` && e.kind.startsWith("node.firmware"),
  );
  return (
    <Section title="Firmware checks">
      <Show loaded={loaded}>
        {(checks) =>
          checks.length === 0 ? (
            <p class="muted">None yet (a release in a pool with a firmware baseline checks it).</p>
          ) : (
            <table data-testid="firmware-checks">
              <Head columns={["Checked", "Generation", "Verdict", "Components"]} />
              <tbody>
                {[...checks].reverse().map((c) => {
                  const components = (c.report as { components?: ComponentCheck[] }).components ?? [];
                  return (
                    <tr key={c.id}>
                      <th scope="row">{when(c.receivedAt)}</th>
                      <td>{c.nodeGeneration}</td>
                      <td>
                        <Badge value={c.compliant ? "compliant" : "drift"} kind={c.compliant ? "pass" : "fail"} />
                      </td>
                      <td>
                        {components
                          .map((k) =>
                            k.drift
                              ? `${k.component}: expected ${k.expected}, found ${k.found ?? "nothing"}`
                              : `${k.component} ${k.found ?? k.expected}`,
                          )
                          .join("; ")}
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          )
        }
      </Show>
    </Section>
  );
}

function WipeReports({ id }: { id: string }) {
  const loaded = useLoad(
    () => must(api.GET("/v1/nodes/{id}/wipe-reports", { params: { path: { id } } })),
    [id],
    (e) => e.subject === `node/${id}` && e.kind.startsWith("node.wipe"),
  );
  return (
    <Section title="Wipe reports">
      <Show loaded={loaded}>
        {(reports) =>
          reports.length === 0 ? (
            <p class="muted">None yet.</p>
          ) : (
            <table>
              <Head columns={["Report", "Received", "Verdict", "Why"]} />
              <tbody>
                {[...reports].reverse().map((r) => (
                  <tr key={r.id}>
                    <th scope="row">
                      <a {...linkProps(`/nodes/${id}/wipe-reports/${r.id}`)}>{r.id}</a>
                    </th>
                    <td>{when(r.receivedAt)}</td>
                    <td>
                      <Badge value={r.accepted ? "accepted" : "refused"} />
                    </td>
                    <td>{r.accepted ? "—" : `${r.code ?? ""}: ${r.reason ?? ""}`}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )
        }
      </Show>
    </Section>
  );
}

function Attestations({ id }: { id: string }) {
  const loaded = useLoad(
    async () => ({
      attestations: await must(api.GET("/v1/nodes/{id}/attestations", { params: { path: { id } } })),
      baselines: await must(api.GET("/v1/nodes/{id}/boot-baselines", { params: { path: { id } } })),
    }),
    [id],
    (e) => e.subject === `node/${id}` && (e.kind.startsWith("node.attestation") || e.kind.startsWith("node.boot-baseline")),
  );
  return (
    <Section title="Measured boot">
      <Show loaded={loaded}>
        {({ attestations, baselines }) =>
          attestations.length === 0 ? (
            <p class="muted">No TPM quote yet.</p>
          ) : (
            <>
              <table data-testid="attestations">
                <Head columns={["Attestation", "Received", "Generation", "Verdict", "Why"]} />
                <tbody>
                  {[...attestations].reverse().map((a) => (
                    <tr key={a.id}>
                      <th scope="row">
                        <a {...linkProps(`/nodes/${id}/attestations/${a.id}`)}>{a.id}</a>
                      </th>
                      <td>{when(a.receivedAt)}</td>
                      <td>{a.identityGeneration}</td>
                      <td>
                        <Badge value={a.verified ? "verified" : "refused"} />
                      </td>
                      <td>{a.verified ? "—" : `${a.code ?? ""}: ${a.reason ?? ""}`}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
              <table data-testid="baselines">
                <caption>Baselines its teardowns compare with</caption>
                <Head columns={["Baseline", "Scope", "State", "Learned by", "Since"]} />
                <tbody>
                  {baselines.map((b) => (
                    <tr key={b.id}>
                      <th scope="row">{b.id}</th>
                      <td>{b.scope === "profile" ? `profile ${b.hardwareProfile ?? ""} at ${b.firmware ?? ""}` : "node"}</td>
                      <td>
                        <Badge value={b.state} />
                      </td>
                      <td>{b.stateReason ?? b.learnedBy}</td>
                      <td>{when(b.createdAt)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </>
          )
        }
      </Show>
    </Section>
  );
}

function Teardowns({ id }: { id: string }) {
  const loaded = useLoad(
    () => must(api.GET("/v1/nodes/{id}/teardowns", { params: { path: { id } } })),
    [id],
    (e) => e.subject === `node/${id}`,
  );
  return (
    <Section title="Teardowns">
      <Show loaded={loaded}>
        {(runs) =>
          runs.length === 0 ? (
            <p class="muted">None yet.</p>
          ) : (
            <>
              {[...runs].reverse().map((run) => {
                const stopped = run.status === "failed" ? run.steps[run.stepIndex]?.name : undefined;
                return (
                  <article key={run.id} class="run" aria-label={`teardown ${run.id}`}>
                    <h3>
                      {run.id} <Badge value={run.status} />
                    </h3>
                    <p class="muted">
                      {run.definition}, started {when(run.createdAt)}, {run.finishedAt ? `ended ${when(run.finishedAt)}` : "running"}
                    </p>
                    {stopped && (
                      <p class="error" data-testid="stopped">
                        Stopped at {stopped}: {run.lastError ?? "no reason recorded"}
                      </p>
                    )}
                    <table>
                      <Head columns={["Step", "Result", "Attempt", "Took", "Detail"]} />
                      <tbody>
                        {run.history.map((h, i) => (
                          <tr key={i}>
                            <th scope="row">{h.step}</th>
                            <td>
                              <Badge value={h.result} />
                            </td>
                            <td>{h.attempt + 1}</td>
                            <td>{duration(h.startedAt, h.finishedAt)}</td>
                            <td class="detail">{JSON.stringify(h.detail)}</td>
                          </tr>
                        ))}
                      </tbody>
                    </table>
                  </article>
                );
              })}
            </>
          )
        }
      </Show>
    </Section>
  );
}

function Timeline({ id }: { id: string }) {
  const loaded = useLoad(() => eventsOf(`node/${id}`), [id], (e) => e.subject === `node/${id}`);
  return (
    <Section title="Events">
      <Show loaded={loaded}>
        {(events) => (
          <EventList events={events} testId="events" />
        )}
      </Show>
    </Section>
  );
}

export function NodePage({ id }: { id: string }) {
  const loaded = useLoad(
    async () => adminView(await must(api.GET("/v1/nodes/{id}", { params: { path: { id } } }))),
    [id],
    (e) => e.subject === `node/${id}`,
  );
  return (
    <main id="main">
      <p>
        <a {...linkProps("/nodes")}>← Nodes</a>
      </p>
      <h1>Node {id}</h1>
      <Show loaded={loaded}>
        {(node) => (
          <>
            <dl class="facts" data-testid="summary">
              <dt>State</dt>
              <dd data-field="state">
                <Badge value={node.state} /> {node.stateReason ?? ""}
              </dd>
              <dt>Power</dt>
              <dd data-field="power">{node.power}</dd>
              <dt>Trust</dt>
              <dd>
                {node.trust}
                {node.tenantRoot ? ", tenant root" : ""}
              </dd>
              <dt>Pool</dt>
              <dd>{node.poolId ?? "—"}</dd>
              <dt>Tenant</dt>
              <dd>{node.owner ?? "—"}</dd>
              <dt>Flags</dt>
              <dd>{[node.maintenance && "maintenance", node.cordoned && "cordoned"].filter(Boolean).join(", ") || "—"}</dd>
              <dt>Identity generation</dt>
              <dd>{node.identityGeneration}</dd>
              <dt>Architecture</dt>
              <dd data-field="architecture">{node.architecture ?? "not commissioned yet"}</dd>
              <dt>Devices</dt>
              <dd>{node.devices.map((d) => `${d.id}${d.healthy ? "" : " (unhealthy)"}`).join(", ") || "—"}</dd>
            </dl>
            <Actions id={node.id} actions={actionsFor(node)} done={loaded.reload} />
          </>
        )}
      </Show>
      <Inventory id={id} />
      <Readings id={id} />
      <FirmwareChecks id={id} />
      <WipeReports id={id} />
      <Attestations id={id} />
      <Teardowns id={id} />
      <SerialConsole id={id} />
      <Timeline id={id} />
    </main>
  );
}
