// Images and profiles: each image's import progress and what it serves, each profile's
// versions and the image they deploy, and where each is deployed now (the nodes of the
// active reservations that asked for it).
import { type Reservation, api, everyPage } from "../api";
import { useLoad } from "../hooks";
import { Badge, Section, Show, when, Head } from "../ui";

function size(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined) return "—";
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(2)} GiB` : `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

/** Nodes of active reservations deploying `profile` (any version), by version. */
export function deployedWhere(reservations: Reservation[], profile: string): Map<number, string[]> {
  const where = new Map<number, string[]>();
  for (const r of reservations.filter((r) => r.state === "active" && r.request.node?.profileId === profile)) {
    const version = r.request.node?.profileVersion ?? 0;
    where.set(version, [...(where.get(version) ?? []), ...r.nodes]);
  }
  return where;
}

export function Images() {
  const loaded = useLoad(
    async () => ({
      images: await everyPage(api.GET("/v1/images")),
      profiles: await everyPage(api.GET("/v1/profiles")),
      reservations: await everyPage(api.GET("/v1/reservations")),
    }),
    [],
    (e) => e.subject.startsWith("image/") || e.subject.startsWith("profile/") || e.subject.startsWith("reservation/"),
  );
  return (
    <main id="main">
      <h1>Images and profiles</h1>
      <Show loaded={loaded}>
        {({ images, profiles, reservations }) => (
          <>
            <Section title="Images">
              {images.length === 0 ? (
                <p class="muted">No images.</p>
              ) : (
                <div class="scroll">
                  <table data-testid="images">
                    <Head columns={["Image", "Name", "Tenant", "State", "Progress", "Served", "SHA-256"]} />
                    <tbody>
                      {images.map((i) => (
                        <tr key={i.id}>
                          <th scope="row">{i.id}</th>
                          <td>{i.name}</td>
                          <td>{i.public ? "public" : i.tenantId}</td>
                          <td>
                            <Badge value={i.state} /> {i.error ?? ""}
                          </td>
                          <td>
                            {i.state === "importing" ? (
                              <progress max={100} value={i.progress.percent ?? undefined} aria-label={`import of ${i.id}`}>
                                {i.progress.percent?.toFixed(0)}%
                              </progress>
                            ) : null}{" "}
                            {size(i.progress.bytesDone)} of {size(i.progress.bytesTotal)}
                          </td>
                          <td>
                            {size(i.servedSizeBytes)} {i.sourceFormat ? `(from ${i.sourceFormat})` : ""}
                          </td>
                          <td>
                            <code class="wrap">{i.servedSha256 ?? "—"}</code>
                          </td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
              )}
            </Section>
            <Section title="Profiles">
              {profiles.length === 0 ? (
                <p class="muted">No profiles.</p>
              ) : (
                profiles.map((p) => {
                  const where = deployedWhere(reservations, p.id);
                  return (
                    <article key={p.id} class="run" aria-label={`profile ${p.id}`}>
                      <h3>
                        {p.id} <span class="muted">({p.public ? "public" : p.tenantId}, latest v{p.latestVersion})</span>
                      </h3>
                      <table>
                        <Head columns={["Version", "Image", "Created", "Deployed on"]} />
                        <tbody>
                          {p.versions.map((v) => (
                            <tr key={v.version}>
                              <th scope="row">v{v.version}</th>
                              <td>{v.imageId ?? "—"}</td>
                              <td>{when(v.createdAt)}</td>
                              <td data-testid={`deployed-${p.id}-${v.version}`}>{where.get(v.version)?.join(", ") || "—"}</td>
                            </tr>
                          ))}
                        </tbody>
                      </table>
                    </article>
                  );
                })
              )}
            </Section>
          </>
        )}
      </Show>
    </main>
  );
}
