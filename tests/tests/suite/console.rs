//! The web console in a real browser: headless Chromium over WebDriver against a real `serve` and a scripted
//! bundle whose Bash calls ask for approval.

use serde_json::{json, Value};

use super::browser::Browser;
use super::operations::Client;
use super::support::{build_long_answer_bundle, write_bundle, Env, Server};

const RULES: &str = "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, action: ask }\n    - { tool: Write, action: ask }\n";

/// The slow answer streams one piece every 150 ms, long enough to reload the page in the middle of it.
const SLOW: &str =
    "the quick brown fox jumps over the lazy dog and keeps on running through the field until the \
                    sun goes down behind the hills far away";

/// A hostile answer: markup that would run script if the console put model text into the page as HTML.
const INJECTION: &str =
    r#"<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>"#;

fn script() -> String {
    format!(
        r#"{{turns: [
  {{when: "approve", replies: [{{tool_calls: [{{name: "Bash", arguments: {{command: "echo approved-output"}}}}]}}, {{text: "done: {{{{last_tool_output}}}}"}}]}},
  {{when: "write", replies: [{{tool_calls: [{{name: "Write", arguments: {{file_path: "page.html", content: "<script>document.title='pwned'</script>\nhello from the console\n"}}}}]}}, {{text: "wrote it"}}]}},
  {{when: "markdown", replies: [{{text: "Here it is.\n\n## Heading x\n\n- item **bold** and `code`\n- [a link](javascript:alert(1))\n\n```\ncode <b>not bold</b>\n```\n\n<script>document.title='md'</script>"}}]}},
  {{when: "slow", replies: [{{text: "{SLOW}", delay_ms: 150}}]}},
  {{when: "inject", replies: [{{text: "{INJECTION}"}}]}},
  {{when: "plan", replies: [{{tool_calls: [{{name: "UpdatePlan", arguments: {{plan: [{{step: "look", status: "completed"}}, {{step: "answer", status: "in_progress"}}]}}}}]}}, {{text: "planned"}}]}},
  {{replies: [{{text: "You asked: {{{{prompt}}}}"}}]}},
]}}"#
    )
}

fn setup() -> (Env, Server) {
    let env = Env::new();
    let dir = env.path("fixture");
    write_bundle(&dir, &script(), RULES, "workspace_write");
    env.run(&["build", dir.to_str().unwrap()]).ok();
    let server = Server::start(env.home.path(), &[], &[]);
    (env, server)
}

/// The number of elements `css` matches.
async fn count(browser: &Browser, css: &str) -> usize {
    browser
        .js(&format!(
            "return document.querySelectorAll({}).length",
            json!(css)
        ))
        .await
        .as_u64()
        .unwrap_or(0) as usize
}

/// Waits until the session shows no running turn.
async fn wait_idle(browser: &Browser) {
    browser
        .wait_js(
            "return document.querySelector('#session-state').textContent === 'idle'",
            "an idle session",
        )
        .await;
}

/// Sends `prompt` from the composer once the session is idle (a turn still ending would answer 409), and waits
/// for its turn to show: until then the page may still say `idle` from before it, and a next `send` would not
/// wait for it.
async fn send(browser: &Browser, prompt: &str) {
    wait_idle(browser).await;
    let before = count(browser, ".msg.user").await;
    browser.type_into("#prompt", prompt).await;
    browser.click("#send").await;
    browser
        .wait_js(
            &format!("return document.querySelectorAll('.msg.user').length > {before}"),
            "the prompt's turn",
        )
        .await;
}

/// Creates a session of the bundle from the page and waits for its address; its id.
async fn new_session(browser: &Browser) -> String {
    browser.click("#new-session button[type=submit]").await;
    browser
        .wait_js(
            "return location.pathname.startsWith('/ui/sessions/')",
            "the session's address",
        )
        .await;
    let url = browser.client.current_url().await.unwrap();
    url.path().trim_start_matches("/ui/sessions/").to_string()
}

async fn sign_in(browser: &Browser, server: &Server) {
    browser.client.goto(&server.base).await.unwrap();
    browser.wait_text("#login h1", "Sign in").await;
    // The page asks for the token before calling what needs it: no refused call on the first load.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let refused: Vec<String> = server
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("status=401"))
        .cloned()
        .collect();
    assert!(
        refused.is_empty(),
        "the first load was refused: {refused:#?}"
    );
    browser.type_into("#token", "not-the-token").await;
    browser.click("#login-form button[type=submit]").await;
    browser.wait_text("#login-error", "refused").await;
    browser
        .type_into("#token", server.token.as_deref().unwrap())
        .await;
    browser.click("#login-form button[type=submit]").await;
    browser.wait_text("#bundles", "local/fixture:1.0.0").await;
}

#[tokio::test]
async fn in_the_browser_a_session_is_created_answers_stream_approvals_are_given_and_a_reload_loses_nothing(
) {
    let (_env, server) = setup();
    let api = Client::of(&server);
    let browser = Browser::start(1280).await;
    sign_in(&browser, &server).await;

    // Create a session from the bundle: the address follows.
    let id = new_session(&browser).await;

    // A prompt, and its streamed answer.
    send(&browser, "hello there").await;
    browser
        .wait_text(".msg.agent .text", "You asked: hello there")
        .await;

    // An approval: the card names the tool, the command and the cwd; allowing it finishes the turn.
    send(&browser, "please approve this").await;
    let card = browser.wait_text(".approval", "echo approved-output").await;
    assert!(
        card.contains("Bash") && card.contains("/workspace") && card.contains("rules[0]"),
        "{card}"
    );
    browser
        .click(".approval button[data-decision=allow_once]")
        .await;
    browser
        .wait_text(".block.exec[data-exit='0']", "approved-output")
        .await;
    browser
        .wait_text(".msg.agent .text", "done: approved-output")
        .await;
    browser.wait_text(".approval", "allow once").await;
    browser.wait_text(".approval strong", "Allowed once").await;

    // A Write's card shows the diff of what it would change; a script in the file stays text.
    send(&browser, "please write the page").await;
    let diff = browser
        .wait_text(
            ".approval:not(.resolved) pre.diff",
            "hello from the console",
        )
        .await;
    assert!(
        diff.contains("+<script>document.title='pwned'</script>"),
        "{diff}"
    );
    assert_eq!(
        count(&browser, ".approval:not(.resolved) pre.diff .add").await,
        2
    );
    assert_eq!(count(&browser, ".approval script").await, 0);
    browser
        .click(".approval:not(.resolved) button[data-decision=allow_once]")
        .await;
    browser.wait_text(".msg.agent .text", "wrote it").await;
    assert_ne!(browser.js("return document.title").await, "pwned");
    browser
        .js("const t = document.querySelector('#transcript'); t.scrollTop = t.scrollHeight; return true")
        .await;
    let shot = browser.screenshot("console.png").await;
    eprintln!("screenshot: {}", shot.display());

    // Markdown in an answer is drawn, and markup in it stays text.
    send(&browser, "some markdown please").await;
    browser
        .wait_text(".msg.agent .text.md h2", "Heading x")
        .await;
    assert_eq!(count(&browser, ".msg.agent .text.md li strong").await, 1);
    assert_eq!(count(&browser, ".msg.agent .text.md li code").await, 1);
    let code = browser
        .js("return document.querySelector('.msg.agent .text.md pre code').textContent")
        .await;
    assert_eq!(code, "code <b>not bold</b>");
    assert_eq!(
        count(
            &browser,
            ".text.md b, .text.md script, .text.md a, #transcript script"
        )
        .await,
        0
    );
    assert!(browser
        .js("return document.querySelector('#transcript').textContent")
        .await
        .as_str()
        .unwrap()
        .contains("<script>document.title='md'</script>"));
    assert_ne!(browser.js("return document.title").await, "md");

    // A plan shows as a checklist.
    send(&browser, "make a plan").await;
    browser.wait_text(".plan", "answer").await;
    assert_eq!(count(&browser, ".plan li.completed").await, 1);

    // Reload in the middle of a streamed answer: the transcript comes back and the stream goes on, with nothing
    // lost or shown twice.
    send(&browser, "a slow one").await;
    browser
        .wait_text(".msg.agent .text", "the quick brown")
        .await;
    let partial = browser
        .js("const t = document.querySelectorAll('.msg.agent .text'); return t[t.length - 1].textContent")
        .await;
    assert!(
        partial.as_str().unwrap().len() < SLOW.len(),
        "the reload happens mid-turn: {partial}"
    );
    browser.client.refresh().await.unwrap();
    browser.wait_text(".msg.agent .text", SLOW).await;
    assert_eq!(count(&browser, ".msg.user").await, 6, "each prompt once");
    let answers = browser
        .js("return [...document.querySelectorAll('.msg.agent .text')].map(e => e.textContent)")
        .await;
    assert_eq!(
        answers.as_array().unwrap().last().unwrap(),
        SLOW,
        "the answer once, whole"
    );
    wait_idle(&browser).await;

    // The keyboard alone: Ctrl+Enter sends; Interrupt stops the turn.
    let keys = format!(
        "slow, from the keyboard{}{}",
        fantoccini::key::Key::Control,
        fantoccini::key::Key::Enter
    );
    wait_idle(&browser).await;
    browser.type_into("#prompt", &keys).await;
    browser
        .wait_text(".msg.user", "slow, from the keyboard")
        .await;
    browser
        .wait_js(
            "return !document.querySelector('#interrupt').disabled",
            "a running turn",
        )
        .await;
    browser.click("#interrupt").await;
    browser.wait_text(".error-msg", "Interrupted").await;
    wait_idle(&browser).await;

    // The events inspector holds the whole journal, each id once, in order.
    let journal = api.journal(&id).await;
    browser.click("#tab-events").await;
    browser
        .wait_js(
            &format!(
                "return document.querySelector('#events-count').dataset.count === '{}'",
                journal.len()
            ),
            "every event in the inspector",
        )
        .await;
    let last = journal.last().unwrap()["id"].as_str().unwrap();
    assert_eq!(
        browser
            .js("return document.querySelector('#events-count').dataset.last")
            .await,
        last
    );
    browser.click("#events .row").await;
    browser.wait_text("#event-detail", "\"session_id\"").await;
    browser.click("#tab-chat").await;
    // The filter narrows both lists.
    browser.type_into("#filter", "no-such-thing").await;
    browser.wait_text("#sessions", "No session matches.").await;
    browser.wait_text("#bundles", "No bundle matches.").await;
    browser.type_into("#filter", "fixture").await;
    browser.wait_text("#bundles", "local/fixture:1.0.0").await;
    assert_eq!(count(&browser, "#sessions a[data-session]").await, 1);

    // The back button leaves the session and comes back to it.
    browser.click("a.brand").await;
    browser.wait_text("#empty", "No session open").await;
    browser.client.back().await.unwrap();
    browser
        .wait_text(".msg.agent .text", "You asked: hello there")
        .await;
    browser.close().await;
}

#[tokio::test]
async fn a_deep_link_opens_the_session_and_the_first_load_is_small_same_origin_and_under_a_strict_policy(
) {
    let (_env, server) = setup();
    let api = Client::of(&server);
    let id = api.session("fixture").await;
    api.turn(&id, "from the api").await;

    // The page: a strict policy, and the API still answers no other origin.
    let http = reqwest::Client::new();
    let page = http.get(server.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    let foreign = http
        .get(server.url("/sessions"))
        .bearer_auth(server.token.as_deref().unwrap())
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    assert_eq!(
        http.get(server.url("/ui/nope.js"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );

    // Model-written markup, in an answer and in command output, stays text.
    api.turn(&id, "inject").await;
    let (status, _) = api
        .json(
            reqwest::Method::POST,
            &format!("/sessions/{id}/commands"),
            Some(json!({"command": "echo '<img src=x onerror=document.title=1>'"})),
        )
        .await;
    assert_eq!(status, 200);

    let browser = Browser::start(360).await;
    sign_in(&browser, &server).await;
    browser
        .client
        .goto(&server.url(&format!("/ui/sessions/{id}")))
        .await
        .unwrap();
    browser
        .wait_text(".msg.agent .text", "You asked: from the api")
        .await;
    browser
        .wait_text(
            ".msg.agent .text",
            "<script>document.title='pwned'</script>",
        )
        .await;
    browser
        .wait_text(".block.exec", "<img src=x onerror=")
        .await;
    assert_eq!(
        count(&browser, "#transcript img, #transcript script").await,
        0
    );
    assert!(!browser
        .js("return document.title")
        .await
        .as_str()
        .unwrap()
        .contains("pwned"));
    let resources: Value = browser
        .js("return performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource')).map(e => ({name: e.name, type: e.initiatorType, bytes: e.encodedBodySize}))")
        .await;
    let resources = resources.as_array().unwrap();
    let mut page_bytes = 0;
    for r in resources {
        let name = r["name"].as_str().unwrap();
        assert!(
            name.starts_with(&server.base),
            "a request to another origin: {name}"
        );
        if r["type"] != "fetch" {
            page_bytes += r["bytes"].as_u64().unwrap_or(0);
        }
    }
    assert!(
        page_bytes > 0 && page_bytes < 100 * 1024,
        "first load {page_bytes} bytes"
    );
    // Readable at 360 px: nothing is wider than the window.
    let overflow = browser
        .js("return document.documentElement.scrollWidth <= window.innerWidth")
        .await;
    assert_eq!(
        overflow,
        Value::Bool(true),
        "the page scrolls sideways at 360 px"
    );
    browser.screenshot("console-360.png").await;
    browser.close().await;
}

#[tokio::test]
async fn a_session_of_ten_thousand_events_renders_whole_with_a_bounded_number_of_rows_in_the_page()
{
    let env = Env::new();
    let text = build_long_answer_bundle(&env, 30_000);
    let server = Server::start(env.home.path(), &["--no-auth"], &[]);
    let api = Client::of(&server);
    let id = api.session("fixture").await;
    api.turn(&id, "go").await;
    let events = api.journal(&id).await.len();
    assert!(events > 10_000, "{events} events");

    let browser = Browser::start(1280).await;
    browser
        .client
        .goto(&server.url(&format!("/ui/sessions/{id}")))
        .await
        .unwrap();
    browser.click("#tab-events").await;
    browser
        .wait_js(
            &format!("return document.querySelector('#events-count').dataset.count === '{events}'"),
            "every event in the inspector",
        )
        .await;
    let rows = count(&browser, "#events .row").await;
    assert!(
        (10..100).contains(&rows),
        "{rows} rows in the page for {events} events"
    );
    browser
        .js("const e = document.querySelector('#events'); e.scrollTop = e.scrollHeight / 2; return true")
        .await;
    browser
        .wait_text("#events .row .seq", &format!("#{}", events / 2))
        .await;
    let shown = browser
        .js("const t = document.querySelectorAll('.msg.agent .text'); return t[t.length - 1].textContent")
        .await;
    assert_eq!(
        shown.as_str().unwrap().len(),
        text.len(),
        "the whole answer, once"
    );
    browser.close().await;
}

#[tokio::test]
async fn rewind_to_here_restores_the_files_and_says_so_in_the_transcript() {
    let (env, server) = setup();
    let browser = Browser::start(1280).await;
    sign_in(&browser, &server).await;
    let id = new_session(&browser).await;
    send(&browser, "hello there").await;
    send(&browser, "please write the page").await;
    browser
        .click(".approval button[data-decision=allow_once]")
        .await;
    browser.wait_text(".msg.agent .text", "wrote it").await;
    let page = env
        .home
        .path()
        .join("sessions")
        .join(&id)
        .join("workspace/page.html");
    assert!(page.exists());
    wait_idle(&browser).await;
    // The second turn's button; the question the page asks is answered yes.
    browser.js("window.confirm = () => true; return true").await;
    browser.click(".turn:nth-of-type(2) button.rewind").await;
    browser
        .wait_text(
            "#transcript",
            "rewound to before turn 2: 1 files restored, conversation cut",
        )
        .await;
    assert!(!page.exists());
    browser.close().await;
}

/// A parent whose `Agent` call runs a child that asks to write: the question sits under the call, the child shows
/// folded there with its state, and its link opens the child's own transcript.
#[tokio::test]
async fn a_subagent_shows_folded_under_its_call_and_opens_on_demand() {
    let env = Env::new();
    let child = env.path("helper");
    write_bundle(
        &child,
        r#"{turns: [{replies: [{tool_calls: [{name: "Write", arguments: {file_path: "helped.txt", content: "done"}}]}, {text: "helper wrote it"}]}]}"#,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Write, action: ask }\n",
        "workspace_write",
    );
    let parent = env.path("fixture");
    write_bundle(
        &parent,
        r#"{turns: [{replies: [{tool_calls: [{name: "Agent", arguments: {subagent: "helper", prompt: "write it"}}]}, {text: "parent says: {{last_tool_output}}"}]}]}"#,
        &format!(
            "subagents:\n  - {{ name: helper, bundle: \"{}\", description: Writes files }}\n",
            child.display()
        ),
        "workspace_write",
    );
    env.run(&["build", parent.to_str().unwrap()]).ok();
    let server = Server::start(env.home.path(), &[], &[]);
    let browser = Browser::start(1280).await;
    sign_in(&browser, &server).await;
    new_session(&browser).await;
    send(&browser, "delegate").await;
    browser
        .wait_js(
            "return !!document.querySelector('details.tool .subagent .approval, details.tool .approval')",
            "the child's question under the Agent call",
        )
        .await;
    let asked = browser
        .js("return document.querySelector('.approval').textContent")
        .await;
    assert!(
        asked.as_str().unwrap().contains("Subagent session"),
        "{asked}"
    );
    browser
        .click(".approval button[data-decision=allow_once]")
        .await;
    browser
        .wait_text(".msg.agent .text", "parent says: helper wrote it")
        .await;
    browser
        .wait_js(
            "return document.querySelector('details.subagent .badge').textContent.startsWith('completed')",
            "the subagent marked completed",
        )
        .await;
    assert_eq!(
        count(&browser, "details.subagent[open]").await,
        0,
        "folded until opened"
    );
    let child_id = browser
        .js("return document.querySelector('details.subagent').dataset.child")
        .await;
    browser
        .js("document.querySelector('details.subagent').open = true; return true")
        .await;
    browser.click("details.subagent a.open-child").await;
    browser
        .wait_js(
            &format!(
                "return location.pathname === '/ui/sessions/{}'",
                child_id.as_str().unwrap()
            ),
            "the child's address",
        )
        .await;
    browser
        .wait_text(".msg.agent .text", "helper wrote it")
        .await;
    browser.close().await;
}

/// Signs in to the console at `server` with `token` and waits for the bundle list.
async fn sign_in_as(browser: &Browser, server: &Server, token: &str) {
    browser.client.goto(&server.base).await.unwrap();
    browser.wait_text("#login h1", "Sign in").await;
    browser.type_into("#token", token).await;
    browser.click("#login-form button[type=submit]").await;
    browser.wait_text("#bundles", "local/fixture:1.0.0").await;
}

#[tokio::test]
async fn two_tenants_in_two_browsers_each_see_only_their_own_sessions() {
    let env = Env::new();
    let dir = env.path("fixture");
    write_bundle(&dir, &script(), RULES, "workspace_write");
    env.run(&["build", dir.to_str().unwrap()]).ok();
    let acme = super::tenants::token_for(env.home.path(), "acme");
    let beta = super::tenants::token_for(env.home.path(), "beta");
    let server = Server::start(env.home.path(), &["--token", "the-operators-token"], &[]);

    let first = Browser::start(1280).await;
    sign_in_as(&first, &server, &acme).await;
    let mine = new_session(&first).await;
    send(&first, "hello").await;
    first
        .wait_text(".msg.agent .text", "You asked: hello")
        .await;

    let second = Browser::start(1280).await;
    sign_in_as(&second, &server, &beta).await;
    let theirs = new_session(&second).await;
    second
        .wait_js(
            &format!("return !!document.querySelector('#sessions a[data-session=\"{theirs}\"]')"),
            "beta's own session listed",
        )
        .await;
    assert_eq!(
        count(&second, "#sessions a[data-session]").await,
        1,
        "beta lists only its own"
    );
    // A deep link to acme's session shows nothing of it.
    second
        .client
        .goto(&format!("{}/ui/sessions/{mine}", server.base))
        .await
        .unwrap();
    second
        .wait_text("#server-status", "no session with id")
        .await;
    let shown = second.body_text().await;
    assert!(!shown.contains("You asked: hello"), "{shown}");
    assert_eq!(count(&second, "#transcript .msg").await, 0);

    // Acme's console, reloaded, still lists only acme's session.
    first.client.refresh().await.unwrap();
    first
        .wait_js(
            &format!("return !!document.querySelector('#sessions a[data-session=\"{mine}\"]')"),
            "acme's session listed",
        )
        .await;
    assert_eq!(
        count(&first, "#sessions a[data-session]").await,
        1,
        "acme lists only its own"
    );
    first.close().await;
    second.close().await;
}

/// What the agent did reads as in the terminal: tool lines without the sandbox's `/workspace`, an edit's change, a
/// command's output once, tables drawn; the list shows each session's title and directory; a new session starts on
/// `default_bundle`.
#[tokio::test]
async fn the_console_shows_tool_lines_without_sandbox_paths_tables_and_starts_on_the_default_bundle(
) {
    let env = Env::new();
    let script = r#"{turns: [{replies: [
      {tool_calls: [{name: "Write", arguments: {file_path: "notes.md", content: "old\n"}}]},
      {tool_calls: [{name: "Edit", arguments: {file_path: "notes.md", old_string: "old", new_string: "new"}}]},
      {tool_calls: [{name: "Bash", arguments: {command: "echo once-only-$((6*7))"}}]},
      {text: "Done.\n\n| file | change |\n|---|---|\n| notes.md | edited |\n| a | b |\n| c | d |"}]}]}"#;
    // And a policy hook on commands, whose decision the console shows as the terminal does.
    let hooks = "permissions: { default: allow }\nhooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n        \
                 - { type: command, command: \"python3 $SERVICE_BUNDLE_DIR/hooks/allow.py\" }\n";
    write_bundle(&env.path("fixture"), script, hooks, "workspace_write");
    std::fs::create_dir_all(env.path("fixture/hooks")).unwrap();
    std::fs::write(
        env.path("fixture/hooks/allow.py"),
        "import json\nprint(json.dumps({'hookSpecificOutput': {'hookEventName': 'PreToolUse', \
         'permissionDecision': 'allow', 'permissionDecisionReason': 'checked by policy'}}))\n",
    )
    .unwrap();
    env.run(&["build", env.path("fixture").to_str().unwrap()])
        .ok();
    // A bundle whose name sorts first: the picker must still start on the configured default.
    let other = env.path("aaa");
    write_bundle(&other, script, "", "read_only");
    let manifest = std::fs::read_to_string(other.join("service.bundle.json5"))
        .unwrap()
        .replace("id: \"fixture\"", "id: \"aaa\"");
    std::fs::write(other.join("service.bundle.json5"), manifest).unwrap();
    env.run(&["build", other.to_str().unwrap()]).ok();
    env.run(&["config", "set", "default_bundle", "fixture"])
        .ok();
    let server = Server::start(env.home.path(), &[], &[]);
    let browser = Browser::start(1280).await;
    sign_in(&browser, &server).await;
    assert_eq!(
        browser
            .js("return document.querySelector('#bundle').value")
            .await,
        "local/fixture:1.0.0"
    );
    let id = new_session(&browser).await;
    send(&browser, "show me the change").await;
    browser.wait_text(".msg.agent .text", "Done.").await;
    wait_idle(&browser).await;
    let text = browser
        .js("return document.querySelector('#transcript').textContent")
        .await;
    // The session's own directory on the host (under the store, as the server makes one) may be named.
    let host = env.home.path().join(format!("sessions/{id}/workspace"));
    let text = text
        .as_str()
        .unwrap()
        .replace(host.to_str().unwrap(), "HOST");
    assert!(text.contains("in HOST"), "{text}");
    assert!(!text.contains("/workspace"), "{text}");
    // The supervisor's renderer names each call, then its outcome, as the terminal does.
    assert!(text.contains("Wrote notes.md (+1 -0)"), "{text}");
    assert!(text.contains("Edited notes.md (+1 -1)"), "{text}");
    assert!(text.contains("$ echo once-only-$((6*7))"), "{text}");
    assert!(
        text.contains("hook PreToolUse (bundle)") && text.contains("allow: checked by policy"),
        "{text}"
    );
    assert_eq!(
        text.matches("once-only-42").count(),
        1,
        "the output shows once: {text}"
    );
    assert_eq!(
        count(&browser, "#transcript .diff .add").await,
        2,
        "the write's and the edit's + lines"
    );
    assert_eq!(count(&browser, "#transcript table tbody tr").await, 3);
    assert_eq!(count(&browser, "#transcript table thead th").await, 2);
    browser.wait_text("#sessions", "show me the change").await;
    let listed = browser.wait_text("#sessions", "1 turn").await;
    assert!(
        listed.contains("/sessions/"),
        "the directory is shown: {listed}"
    );
    browser.close().await;
}
