// Playwright against a running scheduler (METAL_URL), in Debian's Chromium: the browser
// comes from apt, never from a download. sim/tests/console.rs sets the site up and runs this.
import { defineConfig } from "@playwright/test";

export default defineConfig({
  testDir: "e2e",
  timeout: 120_000,
  expect: { timeout: 30_000 },
  workers: 1,
  fullyParallel: false,
  forbidOnly: true,
  reporter: [["list"]],
  use: {
    baseURL: process.env.METAL_URL,
    viewport: { width: 1280, height: 800 },
    launchOptions: {
      executablePath: process.env.METAL_CHROMIUM ?? "/usr/bin/chromium",
      args: ["--no-sandbox", "--disable-dev-shm-usage"],
    },
    trace: "off",
  },
});
