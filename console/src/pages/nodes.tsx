// Every node in a table filtered by text, state and pool, a page of rows at a time (a fleet of
// thousands stays quick to render); rows move as the live stream says.
import { useEffect, useState } from "preact/hooks";
import { type Node, api, everyPage } from "../api";
import { useLoad } from "../hooks";
import { linkProps } from "../router";
import { Badge, Show, Head } from "../ui";

function health(n: Node): string {
  if (n.state === "failed") return "failed";
  if (n.maintenance) return "maintenance";
  if (n.devices.some((d) => !d.healthy)) return "degraded";
  return "ok";
}

/** Rows on one page of the table. */
const PAGE = 100;

export function Nodes() {
  const [text, setText] = useState("");
  const [state, setState] = useState("");
  const [pool, setPool] = useState("");
  const [page, setPage] = useState(0);
  // A new filter shows its first page.
  useEffect(() => setPage(0), [text, state, pool]);
  const loaded = useLoad(
    () => everyPage(api.GET("/v1/nodes", {})),
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
          const pages = Math.max(1, Math.ceil(shown.length / PAGE));
          // The list may have shrunk under the page shown (a filter, or nodes gone).
          const current = Math.min(page, pages - 1);
          const rows = shown.slice(current * PAGE, (current + 1) * PAGE);
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
                    {rows.map((n) => (
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
              {pages > 1 && (
                <nav class="pager" aria-label="Pages of nodes">
                  <button type="button" disabled={current === 0} onClick={() => setPage(current - 1)}>
                    Previous page
                  </button>
                  <span>
                    Rows {current * PAGE + 1}–{current * PAGE + rows.length} of {shown.length}
                  </span>
                  <button type="button" disabled={current === pages - 1} onClick={() => setPage(current + 1)}>
                    Next page
                  </button>
                </nav>
              )}
            </>
          );
        }}
      </Show>
    </main>
  );
}
