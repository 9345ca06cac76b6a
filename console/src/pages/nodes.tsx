// Every node in a table filtered by text, state and pool; rows move as the live stream says.
import { useState } from "preact/hooks";
import { type Node, api, must } from "../api";
import { useLoad } from "../hooks";
import { linkProps } from "../router";
import { Badge, Show, Head } from "../ui";

function health(n: Node): string {
  if (n.state === "failed") return "failed";
  if (n.maintenance) return "maintenance";
  if (n.devices.some((d) => !d.healthy)) return "degraded";
  return "ok";
}

export function Nodes() {
  const [text, setText] = useState("");
  const [state, setState] = useState("");
  const [pool, setPool] = useState("");
  const loaded = useLoad(
    () => must(api.GET("/v1/nodes", {})),
    [],
    (e) => e.subject.startsWith("node/"),
  );
  return (
    <main id="main">
      <h1>Nodes</h1>
      <Show loaded={loaded}>
        {(nodes) => {
          const states = [...new Set(nodes.map((n) => n.state))].sort();
          const pools = [...new Set(nodes.map((n) => n.poolId ?? ""))].filter(Boolean).sort();
          const needle = text.toLowerCase();
          const shown = nodes.filter(
            (n) =>
              (!state || n.state === state) &&
              (!pool || n.poolId === pool) &&
              (!needle ||
                [n.id, n.owner ?? "", ...Object.entries(n.labels).map(([k, v]) => `${k}=${v}`)].some((s) =>
                  s.toLowerCase().includes(needle),
                )),
          );
          return (
            <>
              <form class="filters" role="search" onSubmit={(e) => e.preventDefault()}>
                <label>
                  Search
                  <input type="search" value={text} onInput={(e) => setText((e.target as HTMLInputElement).value)} />
                </label>
                <label>
                  State
                  <select value={state} onChange={(e) => setState((e.target as HTMLSelectElement).value)}>
                    <option value="">any</option>
                    {states.map((s) => (
                      <option key={s}>{s}</option>
                    ))}
                  </select>
                </label>
                <label>
                  Pool
                  <select value={pool} onChange={(e) => setPool((e.target as HTMLSelectElement).value)}>
                    <option value="">any</option>
                    {pools.map((p) => (
                      <option key={p}>{p}</option>
                    ))}
                  </select>
                </label>
                <output aria-live="polite">
                  {shown.length} of {nodes.length}
                </output>
              </form>
              <div class="scroll">
                <table class="nodes">
                  <caption class="sr-only">Nodes</caption>
                  <Head columns={["Node", "State", "Power", "Trust", "Tenant root", "Health", "Pool", "Rack", "Labels"]} />
                  <tbody>
                    {shown.map((n) => (
                      <tr key={n.id} data-node={n.id}>
                        <th scope="row">
                          <a {...linkProps(`/nodes/${n.id}`)}>{n.id}</a>
                        </th>
                        <td data-field="state">
                          <Badge value={n.state} />
                        </td>
                        <td data-field="power">{n.power}</td>
                        <td>{n.trust}</td>
                        <td>{n.tenantRoot ? "yes" : "no"}</td>
                        <td>
                          <Badge value={health(n)} kind={`health-${health(n)}`} />
                        </td>
                        <td>{n.poolId ?? "—"}</td>
                        <td>{n.labels.rack ?? "—"}</td>
                        <td class="labels">
                          {Object.entries(n.labels)
                            .filter(([k]) => k !== "rack")
                            .map(([k, v]) => `${k}=${v}`)
                            .join(" ")}
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            </>
          );
        }}
      </Show>
    </main>
  );
}
