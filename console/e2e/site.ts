// What the specs share: the site's settings sim/tests/console.rs passes in the environment,
// and the API called directly (to set a scene or make events), as a client other than the
// page.

export function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run this through sim/tests/console.rs`);
  return value;
}

export const base = env("METAL_URL");

/** Calls the API with `token`; the JSON answer (null when empty), or throws with its status. */
export async function api(path: string, token: string, init: RequestInit = {}) {
  const response = await fetch(base + path, {
    ...init,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", ...(init.headers ?? {}) },
  });
  if (!response.ok) throw new Error(`${init.method ?? "GET"} ${path}: ${response.status} ${await response.text()}`);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}
