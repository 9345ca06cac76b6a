// Usage per tenant as a chart: the meter's quantity per day, and the totals.
import { useState } from "preact/hooks";
import { type Schemas, type Session, api, everyPage, must } from "../api";
import { useLoad } from "../hooks";
import { Section, Show } from "../ui";

/** Quantity per (meter, UTC day of the window's start), days in order. */
export function perDay(records: Schemas["UsageRecord"][]): { meter: string; days: [string, number][] }[] {
  const meters = new Map<string, Map<string, number>>();
  for (const r of records) {
    const days = meters.get(r.meter) ?? meters.set(r.meter, new Map()).get(r.meter)!;
    const day = r.windowStart.slice(0, 10);
    days.set(day, (days.get(day) ?? 0) + r.quantity);
  }
  return [...meters.entries()].map(([meter, days]) => ({ meter, days: [...days.entries()].sort(([a], [b]) => a.localeCompare(b)) }));
}

function Chart({ usage }: { usage: Schemas["Usage"] }) {
  return (
    <>
      <ul class="counts" aria-label="totals">
        {Object.entries(usage.totals).map(([meter, total]) => (
          <li key={meter}>
            {meter}: <strong>{total.toFixed(2)}</strong>
          </li>
        ))}
      </ul>
      {perDay(usage.records).map(({ meter, days }) => {
        const top = Math.max(...days.map(([, q]) => q), 1e-9);
        return (
          <figure key={meter} class="week">
            <figcaption>
              {meter} per day, tenant {usage.tenantId}
            </figcaption>
            <ol>
              {days.map(([day, q]) => (
                <li key={day} aria-label={`${day}: ${q.toFixed(2)}`}>
                  <span class="bar" style={{ height: `${(q / top) * 100}%` }} />
                  <span class="day">{day.slice(5)}</span>
                  <span class="value">{q.toFixed(1)}</span>
                </li>
              ))}
            </ol>
          </figure>
        );
      })}
      {usage.records.length === 0 && <p class="muted">No usage recorded.</p>}
    </>
  );
}

export function Usage({ session }: { session: Session }) {
  const admin = session.role === "platform-admin";
  const tenants = useLoad(() => (admin ? everyPage(api.GET("/v1/tenants")) : Promise.resolve([])), [admin]);
  const [chosen, setChosen] = useState<string>("");
  const tenant = admin ? chosen || tenants.data?.[0]?.id || "" : (session.tenantId ?? "");
  const usage = useLoad(
    () => (tenant ? must(api.GET("/v1/usage", { params: { query: { tenantId: tenant } } })) : Promise.reject(new Error("no tenant yet"))),
    [tenant],
    (e) => e.kind.startsWith("meter") || e.kind.startsWith("reservation"),
  );
  return (
    <main id="main">
      <h1>Usage</h1>
      {admin && (
        <label>
          Tenant{" "}
          <select value={tenant} onChange={(e) => setChosen((e.target as HTMLSelectElement).value)}>
            {(tenants.data ?? []).map((t) => (
              <option key={t.id} value={t.id}>
                {t.name}
              </option>
            ))}
          </select>
        </label>
      )}
      <Section title={`Usage of ${tenant || "…"}`}>
        <Show loaded={usage}>{(u) => <Chart usage={u} />}</Show>
      </Section>
    </main>
  );
}
