// The console's shell: sign-in, the session, the navigation and the page for the path.
import { Component, type ComponentChildren, render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiFailure, type Session, api, must, setToken, syncClock, token } from "./api";
import * as live from "./live";
import { Attestation } from "./pages/attestation";
import { Certificate } from "./pages/certificate";
import { Fleet } from "./pages/fleet";
import { Images } from "./pages/images";
import { Leases, ReservationPage } from "./pages/leases";
import { MachinePage, Machines } from "./pages/machines";
import { NodePage } from "./pages/node";
import { Nodes } from "./pages/nodes";
import { SignIn } from "./pages/signin";
import { Usage } from "./pages/usage";
import { linkProps, navigate, usePath } from "./router";

function Page({ path, session }: { path: string; session: Session }) {
  const admin = session.role === "platform-admin";
  let parts: string[];
  try {
    parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  } catch {
    parts = ["not found"];
  }
  const [first, id, sub, report] = parts;
  if (parts.length === 0) return admin ? <Fleet /> : <Leases session={session} />;
  if (first === "leases" && parts.length === 1) return <Leases session={session} />;
  if (first === "reservations" && id) return <ReservationPage id={id} session={session} />;
  if (first === "usage") return <Usage session={session} />;
  if (!admin && first === "machines" && parts.length === 1) return <Machines />;
  if (!admin && first === "machines" && id && !sub) return <MachinePage key={id} id={id} session={session} />;
  if (first === "images") return <Images />;
  if (admin && first === "nodes" && parts.length === 1) return <Nodes />;
  if (admin && first === "nodes" && id && !sub) return <NodePage key={id} id={id} />;
  if (admin && first === "nodes" && id && sub === "wipe-reports" && report) return <Certificate node={id} report={report} />;
  if (admin && first === "nodes" && id && sub === "attestations" && report)
    return <Attestation node={id} attestation={report} />;
  return (
    <main id="main">
      <h1>Not found</h1>
      <p>Nothing here for this sign-in.</p>
    </main>
  );
}

/** Keeps one page's failure (an answer of an unexpected shape) from blanking the console. */
class Boundary extends Component<{ children: ComponentChildren }, { failed: string | null }> {
  state = { failed: null as string | null };
  static getDerivedStateFromError(e: unknown) {
    return { failed: e instanceof Error ? e.message : String(e) };
  }
  render() {
    if (this.state.failed === null) return this.props.children;
    return (
      <main id="main">
        <h1>This page failed</h1>
        <p class="error" role="alert">
          {this.state.failed}
        </p>
      </main>
    );
  }
}

function LiveStatus() {
  const [status, setStatus] = useState("connecting");
  useEffect(() => live.onStatus(setStatus), []);
  return (
    <span class={`live live-${status}`} role="status" aria-label={`event stream ${status}`}>
      {status === "live" ? "● live" : `○ ${status}`}
    </span>
  );
}

/** After a move inside the console: the page's title and focus on its heading, so a screen
 * reader says where it is now. */
function useAnnouncePage(path: string) {
  const first = useRef(true);
  useEffect(() => {
    const h1 = document.querySelector<HTMLElement>("main h1");
    document.title = h1 ? `${h1.textContent} · metal console` : "metal console";
    if (first.current) {
      first.current = false;
      return;
    }
    if (h1) {
      h1.tabIndex = -1;
      h1.focus();
    }
  }, [path]);
}

function App() {
  const path = usePath();
  useAnnouncePage(path);
  const [signedIn, setSignedIn] = useState(token() !== null);
  const [session, setSession] = useState<Session | null>(null);
  const [problem, setProblem] = useState<string | null>(null);

  const signOut = () => {
    live.stop();
    setToken(null);
    setSession(null);
    setSignedIn(false);
    navigate("/");
  };

  useEffect(
    () =>
      live.onStatus((status) => {
        if (status !== "signed out") return;
        setToken(null);
        setSession(null);
        setSignedIn(false);
        setProblem("The API no longer accepts this token: sign in again.");
      }),
    [],
  );

  useEffect(() => {
    if (!signedIn) return;
    must(api.GET("/v1/session")).then(
      (s) => {
        syncClock(s);
        setSession(s);
        live.start();
      },
      (e: unknown) => {
        setToken(null);
        setSignedIn(false);
        setProblem(e instanceof ApiFailure && e.status === 401 ? "That token was not accepted." : String(e));
      },
    );
  }, [signedIn]);

  if (!signedIn || !session) {
    if (signedIn) return <p class="muted">Signing in…</p>;
    return (
      <SignIn
        problem={problem}
        onToken={(t) => {
          setToken(t);
          setProblem(null);
          setSignedIn(true);
        }}
      />
    );
  }
  const admin = session.role === "platform-admin";
  const current = (p: string) => (path === p || (p !== "/" && path.startsWith(`${p}/`)) ? "page" : undefined);
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header>
        <nav aria-label="Main">
          <span class="brand">metal</span>
          {admin && (
            <a {...linkProps("/")} aria-current={current("/")}>
              Fleet
            </a>
          )}
          {admin && (
            <a {...linkProps("/nodes")} aria-current={current("/nodes")}>
              Nodes
            </a>
          )}
          <a {...linkProps("/leases")} aria-current={current("/leases")}>
            Leases
          </a>
          {!admin && (
            <a {...linkProps("/machines")} aria-current={current("/machines")}>
              Machines
            </a>
          )}
          <a {...linkProps("/usage")} aria-current={current("/usage")}>
            Usage
          </a>
          <a {...linkProps("/images")} aria-current={current("/images")}>
            Images
          </a>
        </nav>
        <div class="who">
          <LiveStatus />
          <span data-testid="who">
            {admin ? "platform admin" : `tenant ${session.tenantId ?? ""}`} ({session.credentialId})
          </span>
          <button type="button" onClick={signOut}>
            Sign out
          </button>
        </div>
      </header>
      <Boundary key={path}>
        <Page path={path} session={session} />
      </Boundary>
    </>
  );
}

const root = document.getElementById("app");
if (root) render(<App />, root);
