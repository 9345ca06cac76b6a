// The typed API client: openapi-fetch over the types openapi-typescript generates from
// scheduler/openapi.json (src/api.d.ts), so an API change that breaks the console fails
// `npm run build`. The token lives in sessionStorage only: never in a URL, never logged.
import createClient from "openapi-fetch";
import type { components, paths } from "./api.d";

export type Schemas = components["schemas"];
export type Node = Schemas["Node"];
export type Reservation = Schemas["Reservation"];
export type MetalEvent = Schemas["Event"];
export type Session = Schemas["Session"];
export type LeasedNode = Schemas["LeasedNode"];
export type Profile = Schemas["Profile"];

/** The whole node record of `GET /v1/nodes/{id}` (an admin's view; a lessee gets its own). */
export function adminView(view: Node | LeasedNode): Node {
  if ("generation" in view) return view;
  throw new Error(`node ${view.id}: the API answered a lessee's view to a page that needs an admin's`);
}

const TOKEN_KEY = "metal.token";

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value: string | null) {
  if (value === null) sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, value);
}

export function authorization(): Record<string, string> {
  const t = token();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

export const api = createClient<paths>({ baseUrl: location.origin });
api.use({
  onRequest({ request }) {
    for (const [name, value] of Object.entries(authorization())) request.headers.set(name, value);
    return request;
  },
});

/** An API answer that was not a success, with the server's own message. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function messageOf(status: number, error: unknown): string {
  const detail = (error as { error?: { message?: string } } | undefined)?.error;
  return detail?.message ? `${status}: ${detail.message}` : `the API answered ${status}`;
}

/** The data of a successful answer; an `ApiFailure` with the server's message otherwise. */
export async function must<T>(call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok || data === undefined) throw new ApiFailure(response.status, messageOf(response.status, error));
  return data;
}

/** Every item of a paged list: the first answer's, then each page its `Link: <...>; rel="next"` names. */
export async function everyPage<T>(call: Promise<{ data?: T[]; error?: unknown; response: Response }>): Promise<T[]> {
  const { data, error, response } = await call;
  if (!response.ok || data === undefined) throw new ApiFailure(response.status, messageOf(response.status, error));
  const items = [...data];
  let next = nextPage(response);
  while (next) {
    const page = await fetch(next, { headers: authorization() });
    const body: unknown = await page.json().catch(() => undefined);
    if (!page.ok || !Array.isArray(body)) throw new ApiFailure(page.status, messageOf(page.status, body));
    items.push(...(body as T[]));
    next = nextPage(page);
  }
  return items;
}

/** One page of a paged list and the cursor of the next, when there is one. */
export async function onePage<T>(
  call: Promise<{ data?: T[]; error?: unknown; response: Response }>,
): Promise<{ items: T[]; next: string | null }> {
  const { response } = await call;
  const items = await must(call);
  const link = nextPage(response);
  return { items, next: link ? new URL(link).searchParams.get("cursor") : null };
}

/** The URL of an answer's `Link: <...>; rel="next"`, when it has one. */
function nextPage(response: Response): string | null {
  const match = /<([^>]*)>\s*;\s*rel="?next"?/.exec(response.headers.get("Link") ?? "");
  return match ? new URL(match[1], location.origin).toString() : null;
}

/** How far the scheduler's clock is ahead of this browser's (set at sign-in). */
let offset = 0;

/** Takes the scheduler's `now` from the session, so pages measure against its clock. */
export function syncClock(session: Session) {
  const server = new Date(session.now).getTime();
  if (!Number.isNaN(server)) offset = server - Date.now();
}

/** The scheduler's clock now, in milliseconds since the epoch. */
export function serverNow(): number {
  return Date.now() + offset;
}
