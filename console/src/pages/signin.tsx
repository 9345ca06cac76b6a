// Sign-in with an API token (what `metal-scheduler` wrote to admin.token, or one from
// POST /v1/credentials). The token is kept in this tab's sessionStorage only.
import { useState } from "preact/hooks";

export function SignIn({ problem, onToken }: { problem: string | null; onToken: (t: string) => void }) {
  const [value, setValue] = useState("");
  return (
    <main id="main" class="signin">
      <h1>metal console</h1>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (value.trim()) onToken(value.trim());
        }}
      >
        <label for="token">API token</label>
        <input
          id="token"
          name="token"
          type="password"
          autocomplete="off"
          required
          value={value}
          onInput={(e) => setValue((e.target as HTMLInputElement).value)}
          aria-describedby="token-help"
        />
        <p id="token-help" class="muted">
          An admin token (the scheduler's admin.token) or a tenant member's token. It stays in this browser tab.
        </p>
        {problem && (
          <p class="error" role="alert">
            {problem}
          </p>
        )}
        <button type="submit" class="primary">
          Sign in
        </button>
      </form>
    </main>
  );
}
