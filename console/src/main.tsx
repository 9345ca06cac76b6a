// The console's shell: sign-in, the session, the navigation and the page for the path.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiFailure, type Session, api, must, setToken, token } from "./api";
import * as live from "./live";
import { Certificate } from "./pages/certificate";
import { Fleet } from "./pages/fleet";
import { Images } from "./pages/images";
import { Leases, ReservationPage } from "./pages/leases";
import { NodePage } from "./pages/node";
import { Nodes } from "./pages/nodes";
import { SignIn } from "./pages/signin";
import { Usage } from "./pages/usage";
import { linkProps, navigate, usePath } from "./router";

function Page({ path, session }: { path: string; session: Session }) {
  const admin = session.role === "platform-admin";
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const [first, id, sub, report] = parts;
  if (parts.length === 0) return admin ? <Fleet /> : <Leases session={session} />;
  if (first === "leases" && parts.length === 1) return <Leases session={session} />;
  if (first === "reservations" && id) return <ReservationPage id={id} session={session} />;
  if (first === "usage") return <Usage session={session} />;
  if (first === "images") return <Images />;
  if (admin && first === "nodes" && parts.length === 1) return <Nodes />;
  if (admin && first === "nodes" && id && !sub) return <NodePage id={id} />;
  if (admin && first === "nodes" && id && sub === "wipe-reports" && report) return <Certificate node={id} report={report} />;
  return (
    <main id="main">
      <h1>Not found</h1>
      <p>Nothing here for this sign-in.</p>
    </main>
  );
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

function App() {
  const path = usePath();
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

  useEffect(() => {
    if (!signedIn) return;
    must(api.GET("/v1/session")).then(
      (s) => {
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
      <Page path={path} session={session} />
    </>
  );
}

const root = document.getElementById("app");
if (root) render(<App />, root);
