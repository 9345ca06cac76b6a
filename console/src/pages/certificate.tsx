// A wipe report as a certificate of sanitization a person reads and prints (NIST SP 800-88
// Rev. 1, appendix G): the device, the method and its category, the verification and its
// coverage, who signed it with which certificate, and the result. The verdict shown is the
// scheduler's own check on receipt; the envelope it checked is a download away.
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { api, authorization, must } from "../api";
import { useLoad } from "../hooks";
import { linkProps } from "../router";
import { Badge, Show, duration, when } from "../ui";

interface Identity {
  serial?: string;
  model?: string;
  wwn?: string;
  sizeBytes?: number;
}
// The payload as posted: a refused report need not have this shape, so every field is read
// as possibly missing.
interface DiskWipe {
  device?: string;
  identity?: Identity;
  method?: string;
  methodReason?: string;
  startedAt?: string;
  finishedAt?: string;
  verification?: { mode?: string; coveragePercent?: number; bytesRead?: number; expected?: string };
  result?: string;
  failure?: string;
  nistCategory?: "clear" | "purge";
}
interface WipeReport {
  nodeId?: string;
  policy?: string;
  disks?: DiskWipe[];
  startedAt?: string;
  finishedAt?: string;
  tool?: { name?: string; version?: string };
}

/** Saves the signed envelope at `path` (an API path) as `name`.dsse.json. */
async function downloadEnvelope(path: string, name: string) {
  const response = await fetch(path, { headers: authorization() });
  if (!response.ok) throw new Error(`the envelope answered ${response.status}`);
  const url = URL.createObjectURL(await response.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = `${name}.dsse.json`;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** The signed envelope at `path` (an API path) to download as `name`.dsse.json, beside
 * `children`, and why it could not be when it could not. */
export function EnvelopeDownload(props: { path: string; name: string; children?: ComponentChildren }) {
  const [problem, setProblem] = useState<string | null>(null);
  const save = () => downloadEnvelope(props.path, props.name).then(() => setProblem(null), (e: unknown) => setProblem(String(e)));
  return (
    <>
      <p class="no-print">
        <button type="button" onClick={save}>
          Download the DSSE envelope
        </button>{" "}
        {props.children}
      </p>
      {problem && (
        <p class="error" role="alert">
          {problem}
        </p>
      )}
    </>
  );
}

/** The scheduler's verdict on a signed report, as it decided on receipt. */
export function Verdict(props: { ok: boolean; code?: string | null; reason?: string | null; children: ComponentChildren }) {
  return (
    <div class={`verdict ${props.ok ? "verdict-ok" : "verdict-refused"}`} role="status" data-testid="verdict">
      {props.ok ? (
        <p>
          <strong>Verified.</strong> {props.children}
        </p>
      ) : (
        <p>
          <strong>Refused: {props.code}.</strong> {props.reason}
        </p>
      )}
    </div>
  );
}

/** The certificate that signed a report, as facts (inside a `dl`). */
export function SignerFacts({ signer }: { signer: { signerFingerprint?: string | null; signerCertificate?: string | null } }) {
  return (
    <>
      <dt>Signer certificate</dt>
      <dd>
        SHA-256 <code class="wrap">{signer.signerFingerprint ?? "—"}</code>
        {signer.signerCertificate && (
          <details>
            <summary>PEM</summary>
            <pre>{signer.signerCertificate}</pre>
          </details>
        )}
      </dd>
    </>
  );
}

const title = (s: string | undefined) => (s ? s[0]?.toUpperCase() + s.slice(1) : "none");

export function Certificate({ node, report }: { node: string; report: string }) {
  const loaded = useLoad(
    () => must(api.GET("/v1/nodes/{id}/wipe-reports/{report}", { params: { path: { id: node, report } } })),
    [node, report],
  );
  return (
    <main id="main" class="certificate">
      <p class="no-print">
        <a {...linkProps(`/nodes/${node}`)}>← Node {node}</a>
      </p>
      <h1>Certificate of sanitization</h1>
      <Show loaded={loaded}>
        {(detail) => {
          const record = detail.record;
          const body = detail.report as WipeReport | undefined;
          return (
            <>
              <Verdict ok={record.accepted} code={record.code} reason={record.reason}>
                metal-scheduler checked this report on receipt ({when(record.receivedAt)}): its signature chains to the site
                CA, the signer is this node's ramdisk, and every inventoried disk is erased and read back.
              </Verdict>
              <dl class="facts">
                <dt>Report</dt>
                <dd>{record.id}</dd>
                <dt>Node</dt>
                <dd>{body?.nodeId ?? record.nodeId}</dd>
                <dt>Policy</dt>
                <dd>{body?.policy ?? "—"}</dd>
                <dt>Period</dt>
                <dd>{body ? `${when(body.startedAt)} to ${when(body.finishedAt)}` : "—"}</dd>
                <dt>Tool</dt>
                <dd>{body?.tool ? `${body.tool.name ?? "?"} ${body.tool.version ?? ""}` : "—"}</dd>
                <dt>Signer</dt>
                <dd>{record.signer ?? "unreadable"}</dd>
                <SignerFacts signer={detail} />
              </dl>
              {(Array.isArray(body?.disks) ? body.disks : []).map((d, i) => (
                <section key={i} class="disk" aria-label={`device ${d.device ?? i}`}>
                  <h2>
                    {d.device} <Badge value={d.result === "pass" ? "pass" : "fail"} />
                  </h2>
                  <dl class="facts">
                    <dt>Manufacturer and model</dt>
                    <dd>{d.identity?.model ?? "—"}</dd>
                    <dt>Serial number</dt>
                    <dd>{d.identity?.serial ?? "—"}</dd>
                    <dt>Size</dt>
                    <dd>{d.identity?.sizeBytes ?? "?"} bytes</dd>
                    <dt>Sanitization method</dt>
                    <dd>
                      {d.method ?? "none"} {d.methodReason ? `(${d.methodReason})` : ""}
                    </dd>
                    <dt>Category</dt>
                    <dd data-field="category">{title(d.nistCategory)}</dd>
                    <dt>Verification</dt>
                    <dd data-field="verification">
                      {d.verification
                        ? `${d.verification.mode ?? "?"}, ${Number(d.verification.coveragePercent).toFixed(3)}% coverage, ${d.verification.bytesRead ?? "?"} bytes read back, expected ${d.verification.expected ?? "?"}`
                        : "none"}
                    </dd>
                    <dt>Took</dt>
                    <dd>{d.startedAt ? duration(d.startedAt, d.finishedAt) : "—"}</dd>
                    <dt>Result</dt>
                    <dd data-field="result">{d.result === "pass" ? "Pass" : `Fail: ${d.failure ?? "no reason given"}`}</dd>
                  </dl>
                </section>
              ))}
              <EnvelopeDownload
                path={`/v1/nodes/${encodeURIComponent(node)}/wipe-reports/${encodeURIComponent(report)}/envelope`}
                name={report}
              >
                <button type="button" onClick={() => print()}>
                  Print
                </button>
              </EnvelopeDownload>
            </>
          );
        }}
      </Show>
    </main>
  );
}
