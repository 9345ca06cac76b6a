// One measured-boot attestation (issue 32), beside the wipe certificate: the scheduler's
// verdict on receipt (the quote's signature, its challenge and the event log replaying to
// it), how its PCRs compare now with the node's active baselines, the events its firmware
// measured, and the ramdisk certificate that signed it; the signed envelope is a download
// away, for `metal-boot verify-attestation` offline.
import { api, must } from "../api";
import { useLoad } from "../hooks";
import { linkProps } from "../router";
import { Badge, Head, Show, when } from "../ui";
import { EnvelopeDownload, SignerFacts, Verdict } from "./certificate";

export function Attestation({ node, attestation }: { node: string; attestation: string }) {
  const loaded = useLoad(
    () => must(api.GET("/v1/nodes/{id}/attestations/{attestation}", { params: { path: { id: node, attestation } } })),
    [node, attestation],
  );
  const path = `/v1/nodes/${encodeURIComponent(node)}/attestations/${encodeURIComponent(attestation)}/envelope`;
  return (
    <main id="main" class="certificate">
      <p class="no-print">
        <a {...linkProps(`/nodes/${node}`)}>← Node {node}</a>
      </p>
      <h1>Measured boot attestation</h1>
      <Show loaded={loaded}>
        {(detail) => {
          const record = detail.record;
          return (
            <>
              <Verdict ok={record.verified} code={record.code} reason={record.reason}>
                metal-scheduler checked this quote on receipt ({when(record.receivedAt)}): the TPM's attestation key signed
                it, it answered the one-time challenge only the node's pinned TPM could open, it binds the ramdisk's own key,
                and the firmware's event log replays to its PCRs.
              </Verdict>
              <dl class="facts">
                <dt>Attestation</dt>
                <dd>{record.id}</dd>
                <dt>Node</dt>
                <dd>{record.nodeId}</dd>
                <dt>Identity generation</dt>
                <dd>{record.identityGeneration}</dd>
                <dt>Ramdisk key</dt>
                <dd>
                  <code class="wrap">{record.ramdiskKey ?? "—"}</code>
                </dd>
                <dt>Event log</dt>
                <dd>{record.logSha256 ? <code class="wrap">SHA-256 {record.logSha256}</code> : "none sent"}</dd>
                <SignerFacts signer={detail} />
              </dl>
              <section aria-label="Against the baselines">
                <h2>Against the node's baselines</h2>
                {detail.comparisons.length === 0 ? (
                  <p class="muted">No active baseline to compare with.</p>
                ) : (
                  <table data-testid="comparisons">
                    <Head columns={["Baseline", "Scope", "PCRs", "Result"]} />
                    <tbody>
                      {detail.comparisons.map((c) => (
                        <tr key={c.baselineId}>
                          <th scope="row">{c.baselineId}</th>
                          <td>{c.scope}</td>
                          <td>{c.pcrs.join(", ")}</td>
                          <td data-field="comparison">{c.difference ?? "every PCR matches"}</td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                )}
              </section>
              <section aria-label="Quoted PCRs">
                <h2>Quoted PCRs (SHA-256)</h2>
                <table data-testid="pcrs">
                  <Head columns={["PCR", "Value"]} />
                  <tbody>
                    {Object.entries(record.pcrs ?? {}).map(([pcr, value]) => (
                      <tr key={pcr}>
                        <th scope="row">{pcr}</th>
                        <td>
                          <code class="wrap">{value}</code>
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </section>
              <section aria-label="Measured events">
                <h2>What the firmware measured</h2>
                {detail.events.length === 0 ? (
                  <p class="muted">Its event log holds no measurement.</p>
                ) : (
                  <table data-testid="events">
                    <Head columns={["Event", "PCR", "Type", "SHA-256"]} />
                    <tbody>
                      {detail.events.map((e) => (
                        <tr key={e.number}>
                          <th scope="row">{e.number}</th>
                          <td>{e.pcr}</td>
                          <td>{e.eventType}</td>
                          <td>
                            <code class="wrap">{e.sha256 ?? "—"}</code>
                          </td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                )}
              </section>
              <EnvelopeDownload path={path} name={record.id}>
                <Badge value={record.verified ? "verified" : "refused"} />
              </EnvelopeDownload>
            </>
          );
        }}
      </Show>
    </main>
  );
}
