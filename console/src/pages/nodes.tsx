// The nodes, a page of rows at a time straight from the API (a fleet of ten thousand is never
// loaded whole): state and pool filter in the database, the search box takes an id prefix or
// a label selector (rack=r1,gpu=h200). The live stream refreshes a row it names by fetching
// that one node, never the list.
import { useEffect, useRef, useState } from "preact/hooks";
import { type Node, api, everyPage, must, onePage } from "../api";
import { useLoad } from "../hooks";
import { onEvent } from "../live";
import { linkProps } from "../router";
import { Badge, Head, Show } from "../ui";

function health(n: Node): string {
  if (n.state === "failed") return "failed";
  if (n.maintenance) return "maintenance";
  if (n.devices.some((d) => !d.healthy)) return "degraded";
  return "ok";
}

/** Rows on one page of the table. */
const PAGE = 100;

const STATES: Node["state"][] = [
  "new",
  "commissioning",
  "ready",
  "allocated",
  "deploying",
  "deployed",
  "rescue",
  "releasing",
  "failed",
  "retired",
];

interface Filter {
  text: string;
  state: string;
  pool: string;
  cursor: string | undefined;
}

function nodePage({ text, state, pool, cursor }: Filter) {
  const search = text.trim();
  const query = {
    limit: PAGE,
    state: (state || undefined) as Node["state"] | undefined,
    pool: pool || undefined,
    label: search.includes("=") ? search : undefined,
    prefix: search && !search.includes("=") ? search : undefined,
    cursor,
  };
  return onePage(api.GET("/v1/nodes", { params: { query } }));
}

/** The shown rows' newer records, fetched one node at a time as events name them. */
function useFreshRows(shown: Node[] | undefined): Map<string, Node> {
  const [fresh, setFresh] = useState(new Map<string, Node>());
  const ids = useRef(new Set<string>());
  useEffect(() => {
    ids.current = new Set(shown?.map((n) => n.id));
    setFresh(new Map());
  }, [shown]);
  useEffect(() => {
    const due = new Set<string>();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const fetchDue = () => {
      timer = undefined;
      for (const id of due) {
        due.delete(id);
        must(api.GET("/v1/nodes/{id}", { params: { path: { id } } })).then(
          (view) => {
            if ("generation" in view && ids.current.has(id)) setFresh((m) => new Map(m).set(id, view));
          },
          (e: unknown) => console.warn(`node ${id}:`, e),
        );
      }
    };
    const off = onEvent((e) => {
      const id = e.subject.startsWith("node/") ? e.subject.slice(5) : undefined;
      if (!id || !ids.current.has(id)) return;
      due.add(id);
      timer ??= setTimeout(fetchDue, 250);
    });
    return () => {
      off();
      if (timer) clearTimeout(timer);
    };
  }, []);
  return fresh;
}

export function Nodes() {
  const [text, setText] = useState("");
  const [state, setState] = useState("");
  const [pool, setPool] = useState("");
  // The cursor of each page up to the one shown (the first page's is none).
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  // A new filter shows its first page.
  useEffect(() => setCursors([undefined]), [text, state, pool]);
  const cursor = cursors[cursors.length - 1];
  const pools = useLoad(() => everyPage(api.GET("/v1/pools")), []);
  const loaded = useLoad(() => nodePage({ text, state, pool, cursor }), [text, state, pool, cursor]);
  const fresh = useFreshRows(loaded.data?.items);
  const first = (cursors.length - 1) * PAGE;
  return (
    <main id="main">
      <h1>Nodes</h1>
      <form class="filters" role="search" onSubmit={(e) => e.preventDefault()}>
        <label>
          Search
          <input
            type="search"
            value={text}
            placeholder="id prefix, or rack=r1,gpu=h200"
            onInput={(e) => setText((e.target as HTMLInputElement).value)}
          />
        </label>
        <label>
          State
          <select value={state} onChange={(e) => setState((e.target as HTMLSelectElement).value)}>
            <option value="">any</option>
            {STATES.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
        <label>
          Pool
          <select value={pool} onChange={(e) => setPool((e.target as HTMLSelectElement).value)}>
            <option value="">any</option>
            {(pools.data ?? []).map((p) => (
              <option key={p.id}>{p.id}</option>
            ))}
          </select>
        </label>
        <output aria-live="polite">{loaded.data ? `${loaded.data.items.length} on this page` : ""}</output>
      </form>
      <Show loaded={loaded}>
        {({ items, next }) => {
          const rows = items.map((n) => fresh.get(n.id) ?? n);
          return (
            <>
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
                        <td class="labels" data-field="labels">
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
              {(cursors.length > 1 || next) && (
                <nav class="pager" aria-label="Pages of nodes">
                  <button type="button" disabled={cursors.length === 1} onClick={() => setCursors(cursors.slice(0, -1))}>
                    Previous page
                  </button>
                  <span>
                    Rows {first + 1}–{first + rows.length}
                  </span>
                  <button type="button" disabled={!next} onClick={() => next && setCursors([...cursors, next])}>
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
