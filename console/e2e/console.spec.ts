// The console end to end against the simulated site sim/tests/console.rs starts.
import AxeBuilder from "@axe-core/playwright";
import { readFile } from "node:fs/promises";
import { type Page, expect, test } from "@playwright/test";
import { api, base, env } from "./site";


const admin = env("METAL_ADMIN_TOKEN");
const tenantToken = env("METAL_TENANT_TOKEN");
const otherToken = env("METAL_OTHER_TOKEN");
const tenant = env("METAL_TENANT");
const clean = env("METAL_CLEAN_NODE");
const refused = env("METAL_REFUSED_NODE");
const liveNode = env("METAL_LIVE_NODE");
const powerNode = env("METAL_POWER_NODE");
const solNode = env("METAL_SOL_NODE");
const activeNode = env("METAL_ACTIVE_NODE");
const simUrl = env("METAL_SIM_URL");
const origin = new URL(base).origin;
const base64url = (t: string) => Buffer.from(t).toString("base64url");
const secrets = [admin, tenantToken, otherToken, ...[admin, tenantToken, otherToken].map(base64url)];
const screenshots = process.env.METAL_SCREENSHOTS;

test.describe.configure({ mode: "serial" });

/** Fails the test on any request that leaves the site or carries a token in its URL, and on
 * any error the page logs. */
function watch(page: Page) {
  const problems: string[] = [];
  page.on("request", (r) => {
    const url = r.url();
    if (!url.startsWith(origin) && !url.startsWith("data:") && !url.startsWith("blob:")) problems.push(`request outside the site: ${url}`);
    if (secrets.some((s) => url.includes(s))) problems.push("a token in a request URL");
  });
  page.on("websocket", (ws) => {
    if (!ws.url().startsWith(origin.replace(/^http/, "ws"))) problems.push(`websocket outside the site: ${ws.url()}`);
    if (secrets.some((s) => ws.url().includes(s))) problems.push("a token in a WebSocket URL");
  });
  page.on("response", (r) => {
    if (r.status() >= 400) problems.push(`${r.status()} from ${new URL(r.url()).pathname}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    // What the page logged goes into the test's output (shown when it fails).
    console.log(`browser ${m.type()}: ${m.text()}`);
    // Failed loads are reported with their URL above.
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push(`console error: ${m.text()}`);
  });
  return problems;
}

async function signIn(page: Page, token: string) {
  await page.goto("/console/");
  await page.getByLabel("API token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("button", { name: "Sign out" })).toBeVisible();
  await expect(page.getByRole("status", { name: "event stream live" })).toBeVisible();
}

async function accessible(page: Page, what: string) {
  const result = await new AxeBuilder({ page }).withTags(["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]).analyze();
  const found = result.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join("; ")})`);
  expect(found, `accessibility of ${what}`).toEqual([]);
}

async function shot(page: Page, name: string) {
  if (screenshots) await page.screenshot({ path: `${screenshots}/${name}.png`, fullPage: true });
}


test("sign-in takes a token, refuses a wrong one, and keeps it out of URLs and storage other than the tab's", async ({ page }) => {
  const problems = watch(page);
  await page.goto("/console/");
  await accessible(page, "the sign-in page");
  await page.getByLabel("API token").fill("not-a-token");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("alert")).toContainText("not accepted");
  await signIn(page, admin);
  await expect(page.getByRole("heading", { name: "Fleet", level: 1 })).toBeVisible();
  await expect(page.getByTestId("who")).toContainText("platform admin");
  expect(page.url()).not.toContain(admin);
  expect(await page.evaluate(() => JSON.stringify(localStorage))).not.toContain(admin);
  await expect(page.getByRole("list", { name: "nodes by state" })).toContainText("ready");
  await accessible(page, "the fleet page");
  await shot(page, "fleet");
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page.getByLabel("API token")).toBeVisible();
  expect(await page.evaluate(() => sessionStorage.getItem("metal.token"))).toBeNull();
  expect(problems).toEqual(["401 from /v1/session"]);
});

test("a tenant sees only its own leases and no node pages", async ({ page }) => {
  const problems = watch(page);
  const ours: { id: string; tenantId: string }[] = await api("/v1/reservations", admin);
  const acme = ours.filter((r) => r.tenantId === tenant).map((r) => r.id);
  expect(acme.length).toBeGreaterThan(0);

  await signIn(page, tenantToken);
  await expect(page.getByRole("heading", { name: "Leases", level: 1 })).toBeVisible();
  await expect(page.getByRole("link", { name: "Nodes" })).toHaveCount(0);
  for (const id of acme) await expect(page.locator(`[data-reservation="${id}"]`)).toBeVisible();
  await accessible(page, "a tenant's leases");
  await page.getByRole("link", { name: acme[0]! }).first().click();
  await expect(page.getByRole("heading", { name: `Reservation ${acme[0]}` })).toBeVisible();
  await expect(page.getByTestId("meter")).toContainText("node.metal.hours");
  await page.getByRole("button", { name: "Sign out" }).click();

  await signIn(page, otherToken);
  await expect(page.getByText("No reservations.")).toBeVisible();
  for (const id of acme) await expect(page.locator(`[data-reservation="${id}"]`)).toHaveCount(0);
  await page.goto(`/console/nodes/${clean}`);
  await expect(page.getByRole("heading", { name: "Not found" })).toBeVisible();
  await page.goto(`/console/reservations/${acme[0]}`);
  await expect(page.getByRole("alert")).toContainText("404");
  expect(problems).toEqual([`404 from /v1/reservations/${acme[0]}`]);
});

test("the live stream moves a node's state on the open page without a reload", async ({ page }) => {
  const problems = watch(page);
  await signIn(page, admin);
  await page.getByRole("link", { name: "Nodes" }).click();
  const row = page.locator(`[data-node="${liveNode}"]`);
  await expect(row.locator('[data-field="state"]')).toHaveText("ready");
  await page.evaluate(() => ((window as unknown as { marker: number }).marker = 42));
  const state = row.locator('[data-field="state"]');
  const move = (from: string, to: string) =>
    api(`/v1/nodes/${liveNode}/transitions`, admin, {
      method: "POST",
      body: JSON.stringify({ from, to, reason: "console test" }),
    });
  await move("ready", "retired");
  await expect(state).toHaveText("retired");
  await move("retired", "new");
  await expect(state).toHaveText("new");
  // Commissioned again through its BMC: the simulated machine network-boots the ramdisk,
  // which reports to the boot service, and the row follows the node back to ready.
  await api(`/v1/nodes/${liveNode}/boot`, admin, { method: "POST", body: JSON.stringify({ target: "pxe" }) });
  await api(`/v1/nodes/${liveNode}/power`, admin, { method: "POST", body: JSON.stringify({ action: "cycle" }) });
  await expect(state).toHaveText("ready", { timeout: 90_000 });
  expect(await page.evaluate(() => (window as unknown as { marker?: number }).marker)).toBe(42);
  await accessible(page, "the nodes table");
  await shot(page, "nodes");
  expect(problems).toEqual([]);
});

async function simPower(node: string): Promise<string> {
  const machines: { id: string; power: string }[] = await (await fetch(`${simUrl}/sim/machines`)).json();
  return machines.find((m) => m.id === node)?.power ?? "missing";
}

test("a stream the API refuses as past the event retention (410) reloads the console, which goes live again", async ({ page }) => {
  const problems = watch(page);
  let refused = 0;
  await page.route("**/v1/events/stream*", async (route) => {
    if (refused > 0) return route.continue();
    refused += 1;
    await route.fulfill({
      status: 410,
      contentType: "application/json",
      body: JSON.stringify({ error: { code: "GONE", message: "the events after 1 up to 9 are past retention" } }),
    });
  });
  let loads = 0;
  page.on("load", () => (loads += 1));
  await signIn(page, admin);
  expect(refused).toBe(1);
  expect(loads, "the first page, then the reload").toBeGreaterThanOrEqual(2);
  await expect(page.getByRole("button", { name: "Sign out" })).toBeVisible();
  expect(problems).toEqual(["410 from /v1/events/stream"]);
});

test("a power action asks for a confirmation that names the node, and reaches the BMC", async ({ page }) => {
  const problems = watch(page);
  await signIn(page, admin);
  await page.goto(`/console/nodes/${powerNode}`);
  await expect(page.getByRole("heading", { name: `Node ${powerNode}` })).toBeVisible();
  // What its commissioning ramdisk reported of the machine.
  await expect(page.locator('[data-field="architecture"]')).toHaveText("x86_64");
  expect(await simPower(powerNode)).toBe("on");

  await page.getByRole("button", { name: "Power off" }).click();
  const dialog = page.getByRole("dialog", { name: `Power off ${powerNode}?` });
  await expect(dialog).toBeVisible();
  await expect(dialog).toHaveAccessibleDescription(/cuts power now/);
  // The safe choice has the focus, and focus comes back to the button that opened it.
  await expect(dialog.getByRole("button", { name: "Cancel" })).toBeFocused();
  await accessible(page, "the confirmation");
  await dialog.getByRole("button", { name: "Cancel" }).click();
  await expect(dialog).toBeHidden();
  await expect(page.getByRole("button", { name: "Power off" })).toBeFocused();
  expect(await simPower(powerNode), "cancel sends nothing").toBe("on");

  await page.getByRole("button", { name: "Power off" }).click();
  await expect(dialog).toBeVisible();
  await page.keyboard.press("Escape");
  await expect(dialog).toBeHidden();
  expect(await simPower(powerNode), "escape sends nothing").toBe("on");

  await page.getByRole("button", { name: "Power off" }).click();
  await dialog.getByRole("button", { name: "Power off" }).click();
  await expect(page.getByRole("status").filter({ hasText: `Power off: done on ${powerNode}` })).toBeVisible();
  await expect.poll(() => simPower(powerNode)).toBe("off");
  await expect(page.getByTestId("summary").locator('[data-field="power"]')).toHaveText("off");

  await page.getByRole("button", { name: "Power on" }).click();
  await page.getByRole("dialog", { name: `Power on ${powerNode}?` }).getByRole("button", { name: "Power on" }).click();
  await expect.poll(() => simPower(powerNode)).toBe("on");
  expect(problems).toEqual([]);
});

test("a lessee sees the machine of its lease, powers, reinstalls and rescues it behind a confirmation, and gets its console's SSH line", async ({ page }) => {
  const problems = watch(page);
  const [leased]: { id: string; reservationId: string; profileId: string; profileVersion: number }[] = await api(
    "/v1/leases",
    tenantToken,
  );
  expect(leased?.id).toBe(activeNode);
  await signIn(page, tenantToken);
  await page.getByRole("link", { name: "Machines" }).click();
  await expect(page.getByRole("heading", { name: "Machines", level: 1 })).toBeVisible();
  const row = page.locator(`[data-machine="${activeNode}"]`);
  await expect(row).toContainText(leased!.reservationId);
  await accessible(page, "a lessee's machines");
  await row.getByRole("link", { name: activeNode }).click();
  await expect(page.getByRole("heading", { name: `Machine ${activeNode}` })).toBeVisible();
  await expect(page.getByTestId("summary").locator('[data-field="state"]')).toContainText("deployed");
  await expect(page.getByTestId("ssh-line")).toHaveText(new RegExp(`^ssh -p \\d+ ${leased!.reservationId}@`));
  await expect(page.getByText("No console sessions yet.")).toBeVisible();

  // Power goes through the platform's BMC session, behind the same confirmation as an admin's.
  await page.getByRole("button", { name: "Power off" }).click();
  await page.getByRole("dialog", { name: `Power off ${activeNode}?` }).getByRole("button", { name: "Power off" }).click();
  await expect(page.getByRole("status").filter({ hasText: `Power off: done on ${activeNode}` })).toBeVisible();
  await expect.poll(() => simPower(activeNode)).toBe("off");
  await page.getByRole("button", { name: "Power on" }).click();
  await page.getByRole("dialog", { name: `Power on ${activeNode}?` }).getByRole("button", { name: "Power on" }).click();
  await expect.poll(() => simPower(activeNode)).toBe("on");
  await expect(page.getByTestId("events")).toContainText("lessee.power");
  await accessible(page, "a lessee's machine");

  // A reinstall of the version deployed, behind its confirmation: the machine deploys again
  // under its lease, and is deployed once more.
  const version = `${leased!.profileId}:${leased!.profileVersion}`;
  await expect(page.getByTestId("reinstall-version")).toHaveValue(version);
  await page.getByRole("button", { name: "Reinstall" }).click();
  await page.getByRole("dialog", { name: `Reinstall ${activeNode} with ${version}?` }).getByRole("button", { name: "Reinstall" }).click();
  await expect(page.getByRole("status").filter({ hasText: `Reinstall: done on ${activeNode}` })).toBeVisible();
  await expect(page.getByTestId("events")).toContainText("lessee.reinstall");
  await expect(page.getByTestId("events")).toContainText("node.tenant-root.reinstalled", { timeout: 120_000 });
  await expect(page.getByTestId("summary").locator('[data-field="state"]')).toContainText("deployed");

  // A rescue behind its confirmation: the machine is in a rescue, says how to log in, and
  // boots its disk again.
  await page.getByRole("button", { name: "Rescue" }).click();
  await page.getByRole("dialog", { name: `Boot ${activeNode} into the rescue environment?` }).getByRole("button", { name: "Rescue" }).click();
  await expect(page.getByRole("status").filter({ hasText: `Rescue: done on ${activeNode}` })).toBeVisible();
  await expect(page.getByTestId("events")).toContainText("node.tenant-root.rescued", { timeout: 120_000 });
  await expect(page.getByTestId("summary").locator('[data-field="state"]')).toContainText("rescue");
  await expect(page.getByTestId("rescue-line")).toContainText("ssh root@ADDRESS");
  await accessible(page, "a lessee's machine in a rescue");
  await page.getByRole("button", { name: "Boot the disk again" }).click();
  await page.getByRole("dialog", { name: `Leave the rescue of ${activeNode}?` }).getByRole("button", { name: "Boot the disk again" }).click();
  await expect(page.getByTestId("events")).toContainText("node.tenant-root.unrescued", { timeout: 120_000 });
  await expect(page.getByTestId("summary").locator('[data-field="state"]')).toContainText("deployed");
  await page.getByRole("button", { name: "Sign out" }).click();

  // Another tenant's member: no such machine.
  await signIn(page, otherToken);
  await page.goto(`/console/machines/${activeNode}`);
  await expect(page.getByRole("alert")).toContainText("404");
  expect(problems).toEqual([`404 from /v1/nodes/${activeNode}`]);
});

test("a wipe certificate renders verified, a refused report shows why, and the envelope downloads", async ({ page }) => {
  const problems = watch(page);
  await signIn(page, admin);
  await page.goto(`/console/nodes/${clean}`);
  // The teardown checked its firmware in band against the pool's baseline first.
  await expect(page.getByTestId("firmware-checks").locator("tbody tr").first()).toContainText(/compliant.*bios 2\.1\.0/);
  const reports = page.getByRole("region", { name: "Wipe reports" });
  await reports.getByRole("link").first().click();
  await expect(page.getByRole("heading", { name: "Certificate of sanitization" })).toBeVisible();
  await expect(page.getByTestId("verdict")).toContainText("Verified.");
  const disks = page.locator("section.disk");
  expect(await disks.count()).toBeGreaterThan(0);
  for (const disk of await disks.all()) {
    await expect(disk.locator('[data-field="result"]')).toHaveText("Pass");
    await expect(disk.locator('[data-field="category"]')).toHaveText(/^(Purge|Clear)$/);
    await expect(disk.locator('[data-field="verification"]')).toContainText("coverage");
  }
  await expect(page.getByText(`spiffe://`).first()).toBeVisible();
  await accessible(page, "a certificate");
  await shot(page, "certificate");

  const download = page.waitForEvent("download");
  await page.getByRole("button", { name: "Download the DSSE envelope" }).click();
  const file = await (await download).path();
  const envelope = JSON.parse(await readFile(file, "utf8"));
  expect(envelope.payloadType).toBe("application/vnd.metal.wipe-report+json");
  expect(envelope.signatures.length).toBe(1);
  const payload = JSON.parse(Buffer.from(envelope.payload, "base64").toString("utf8"));
  expect(payload.nodeId).toBe(clean);

  await page.goto(`/console/nodes/${refused}`);
  await expect(page.getByTestId("stopped")).toContainText("erase");
  await accessible(page, "a quarantined node");
  await shot(page, "node");
  const refusedRow = page.getByRole("region", { name: "Wipe reports" }).locator("tr", { hasText: "refused" }).first();
  await expect(refusedRow).toContainText("disk-failed");
  await refusedRow.getByRole("link").click();
  await expect(page.getByTestId("verdict")).toContainText("Refused: disk-failed.");
  await expect(page.locator('[data-field="result"]').filter({ hasText: "Fail" }).first()).toBeVisible();
  expect(problems).toEqual([]);
});

test("a node's TPM quotes are shown verified against its baseline, with their PCRs, and the envelope downloads", async ({
  page,
}) => {
  const problems = watch(page);
  await signIn(page, admin);
  await page.goto(`/console/nodes/${clean}`);
  const measured = page.getByRole("region", { name: "Measured boot" });
  // Commissioning learned the node's own baseline; each boot since quoted the TPM.
  await expect(measured.getByTestId("baselines").locator("tbody tr").first()).toContainText("commissioning");
  await expect(measured.getByTestId("attestations").locator("tbody tr").first()).toContainText("verified");
  await measured.getByTestId("attestations").getByRole("link").first().click();
  await expect(page.getByRole("heading", { name: "Measured boot attestation" })).toBeVisible();
  await expect(page.getByTestId("verdict")).toContainText("Verified.");
  await expect(page.getByTestId("comparisons").locator('[data-field="comparison"]').first()).toHaveText("every PCR matches");
  await expect(page.getByTestId("pcrs").locator("tbody tr")).toHaveCount(10);
  await accessible(page, "an attestation");
  await shot(page, "attestation");

  const download = page.waitForEvent("download");
  await page.getByRole("button", { name: "Download the DSSE envelope" }).click();
  const envelope = JSON.parse(await readFile(await (await download).path(), "utf8"));
  expect(envelope.payloadType).toBe("application/vnd.metal.attestation.v1+json");
  const payload = JSON.parse(Buffer.from(envelope.payload, "base64").toString("utf8"));
  expect(payload.nodeId).toBe(clean);
  expect(problems).toEqual([]);
});

test("the serial console shows the machine's Serial-over-LAN stream, and the session is audited", async ({ page }) => {
  const problems = watch(page);
  const me: { credentialId: string } = await api("/v1/session", admin);
  await signIn(page, admin);
  await page.goto(`/console/nodes/${solNode}`);
  await page.getByRole("button", { name: "Open the serial console" }).click();
  await expect(page.getByTestId("console-status")).toContainText("connected");
  const terminal = page.getByTestId("terminal");
  // The machine answers "hi there" to "hello" on its serial line, through ipmi_sim's SOL.
  await expect(async () => {
    await terminal.click();
    await page.keyboard.type("hello\r");
    await expect(terminal).toContainText("hi there", { timeout: 2_000 });
  }).toPass({ timeout: 30_000 });
  await accessible(page, "the serial console");
  await shot(page, "serial-console");
  // The terminal takes Tab and Escape for the machine; Ctrl+] leaves it for the page.
  await page.keyboard.press("Control+BracketRight");
  await expect(page.getByRole("button", { name: "Close the console" })).toBeFocused();
  await page.keyboard.press("Enter");
  await expect(page.getByRole("button", { name: "Open the serial console" })).toBeFocused();
  const audit = page.getByTestId("console-sessions");
  await expect(audit).toContainText(me.credentialId);
  await expect(audit.locator("tbody tr").first().locator("td").nth(2)).not.toHaveText("—");
  // Never commissioned: it has no inventory to show, and says so.
  await expect(page.getByText("Not commissioned yet: no inventory.")).toBeVisible();
  await expect(page.getByTestId("readings")).toContainText("MontaVista");
  expect(problems).toEqual([`404 from /v1/nodes/${solNode}/inventory`]);
});

test("images and profiles show the import, its digest and where each version is deployed; racks show what is free next week", async ({ page }) => {
  const problems = watch(page);
  const images: { id: string; servedSha256: string }[] = await api("/v1/images", admin);
  expect(images.length).toBeGreaterThan(0);
  await signIn(page, admin);
  await page.getByRole("link", { name: "Images", exact: true }).click();
  const table = page.getByTestId("images");
  for (const image of images) {
    const row = table.locator("tr", { hasText: image.id });
    await expect(row).toContainText("ready");
    await expect(row).toContainText(image.servedSha256);
  }
  await expect(page.getByTestId("deployed-acme-os-1")).toHaveText(activeNode);
  await accessible(page, "the images page");
  await shot(page, "images");

  // Free all next week: ready, in no maintenance, cordoned by nobody and booked by nothing.
  const nodes: { id: string; state: string; maintenance: boolean; cordoned: boolean; labels: Record<string, string> }[] =
    await api("/v1/nodes", admin);
  const reservations: { state: string; nodes: string[] }[] = await api("/v1/reservations", admin);
  const booked = new Set(reservations.filter((r) => ["pending", "active"].includes(r.state)).flatMap((r) => r.nodes));
  expect(booked.has(activeNode)).toBe(true);
  await page.getByRole("link", { name: "Fleet", exact: true }).click();
  // Today by the scheduler's clock (the simulated site's runs ahead of the browser's): the
  // pool's bar counts the week-long lease booked now.
  const session: { now: string } = await api("/v1/session", admin);
  const today = session.now.slice(0, 10);
  const dayStart = Date.parse(`${today}T00:00:00Z`);
  const heldToday = (reservations as { state: string; nodes: string[]; start: string; end: string; poolId: string }[]).filter(
    (r) => ["pending", "active", "ended"].includes(r.state) && Date.parse(r.start) < dayStart + 86_400_000 && Date.parse(r.end) > dayStart,
  );
  expect(heldToday.length).toBeGreaterThan(0);
  const todayBar = page.locator('[data-pool="gpu"] li.today');
  await expect(todayBar).toHaveAttribute("aria-label", new RegExp(`^${today}: ${heldToday.reduce((n, r) => n + r.nodes.length, 0)} booked`));
  for (const rack of new Set(nodes.map((n) => n.labels.rack ?? "no rack"))) {
    const inRack = nodes.filter((n) => (n.labels.rack ?? "no rack") === rack);
    const free = inRack.filter((n) => n.state === "ready" && !n.maintenance && !n.cordoned && !booked.has(n.id));
    await expect(page.locator(`[data-rack="${rack}"] figcaption`)).toHaveText(`${rack}: ${free.length} of ${inRack.length} free all next week`);
  }
  expect(problems).toEqual([]);
});

test("keyboard alone reaches every page, and the pages fit a narrow screen", async ({ page }) => {
  const problems = watch(page);
  await signIn(page, admin);
  await page.keyboard.press("Tab");
  await expect(page.getByRole("link", { name: "Skip to content" })).toBeFocused();
  // Tab walks the navigation in order; Enter opens the page and its heading takes the focus.
  for (const name of ["Nodes", "Leases", "Usage", "Images", "Fleet"]) {
    for (let i = 0; i < 8; i++) {
      if (await page.getByRole("link", { name, exact: true }).evaluate((e) => e === document.activeElement)) break;
      await page.keyboard.press("Tab");
    }
    await expect(page.getByRole("link", { name, exact: true })).toBeFocused();
    await page.keyboard.press("Enter");
    const heading = page.getByRole("heading", { name: name === "Images" ? "Images and profiles" : name, level: 1 });
    await expect(heading).toBeFocused();
    expect(await page.title()).toContain(name === "Images" ? "Images and profiles" : name);
    // From the heading, back up to the navigation's start.
    await page.getByRole("link", { name: "Skip to content" }).focus();
  }
  await page.goto("/console/leases");
  await expect(page.getByRole("group", { name: /^timeline/ })).toBeVisible();
  await accessible(page, "the leases page");
  await shot(page, "leases");
  await page.goto("/console/usage");
  await expect(page.getByRole("list", { name: "totals" })).toContainText("node.metal.hours");
  await accessible(page, "the usage page");

  await page.setViewportSize({ width: 390, height: 844 });
  for (const path of ["/console/", "/console/nodes", `/console/nodes/${clean}`, "/console/leases", "/console/usage", "/console/images"]) {
    await page.goto(path);
    await expect(page.locator("main h1")).toBeVisible();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    expect(overflow, `${path} scrolls sideways at 390 px`).toBeLessThanOrEqual(0);
  }
  expect(problems).toEqual([]);
});

test("a fleet of hundreds shows a page of nodes at a time from the API, and a filter starts at its first page", async ({ page }) => {
  const problems = watch(page);
  const ids = Array.from({ length: 230 }, (_, i) => `page-${String(i).padStart(3, "0")}`);
  await api("/v1/nodes/import", admin, { method: "POST", body: JSON.stringify(ids.map((id) => ({ id }))) });
  const all: { id: string }[] = await api("/v1/nodes", admin);
  expect(all.length).toBeGreaterThan(200);

  await signIn(page, admin);
  await page.goto("/console/nodes");
  const rows = page.locator("table.nodes tbody tr");
  const pager = page.getByRole("navigation", { name: "Pages of nodes" });
  await expect(rows).toHaveCount(100);
  await expect(pager).toContainText("Rows 1–100");
  await expect(pager.getByRole("button", { name: "Previous page" })).toBeDisabled();
  await expect(rows.first()).toHaveAttribute("data-node", all[0]!.id);
  await pager.getByRole("button", { name: "Next page" }).click();
  await expect(pager).toContainText("Rows 101–200");
  await expect(rows.first()).toHaveAttribute("data-node", all[100]!.id);
  await accessible(page, "a page of the nodes table");
  const last = Math.floor((all.length - 1) / 100);
  for (let p = 2; p <= last; p++) {
    await pager.getByRole("button", { name: "Next page" }).click();
    await expect(pager).toContainText(`Rows ${p * 100 + 1}–`);
  }
  await expect(rows).toHaveCount(all.length - last * 100);
  await expect(pager.getByRole("button", { name: "Next page" })).toBeDisabled();

  // Ten nodes start with the prefix: one page, no pager, and the rows are the first ones again.
  await page.getByLabel("Search").fill("page-22");
  await expect(page.locator("form.filters output")).toHaveText("10 on this page");
  await expect(rows).toHaveCount(10);
  await expect(pager).toHaveCount(0);
  await expect(rows.first()).toHaveAttribute("data-node", "page-220");
  await page.getByLabel("Search").fill("");
  await expect(pager).toContainText("Rows 1–100");
  expect(problems).toEqual([]);
});
