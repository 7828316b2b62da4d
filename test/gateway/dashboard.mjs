// Drives exo's dashboard in headless Chromium (Debian's chromium, through
// puppeteer-core from the test-only tools): loads the page, enters the token
// if the page asks for one, waits until every node and device is shown,
// sends a chat message and waits for the streamed answer to finish, waits
// for a job whose placement names a device, and keeps a screenshot.
//
//   node dashboard.mjs --url http://127.0.0.1:PORT/ [--token T]
//        --nodes alpha,beta,gamma --devices alpha/cpu0,beta/cpu0,...
//        --screenshot OUT.png [--chromium /usr/bin/chromium] [--tools DIR]
//        [--timeout SECONDS]   (each step's; 120 by default)
//   node dashboard.mjs --mock [--screenshot OUT.png]   (against dashboard_mock.mjs)
//
// Fails (exit 1, with the reason) on any console error or warning, any
// uncaught page error, any request to another origin, any failed request or
// HTTP error status — except the 401s the page gets before it is given the
// token. Exit 77 (ctest's SKIP) when puppeteer-core or chromium is missing.
// The tools folder is --tools, else $EXO_TEST_TOOLS, else
// ~/.cache/exo-test-tools.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const SKIP = 77;
const started = Date.now();

function parseArgs(argv) {
  const opts = { mock: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--mock") {
      opts.mock = true;
      continue;
    }
    const m = a.match(/^--(url|token|nodes|devices|screenshot|chromium|tools|timeout)(?:=(.*))?$/);
    if (!m)
      usage(`unknown argument ${JSON.stringify(a)}`);
    const value = m[2] ?? argv[++i];
    if (value === undefined)
      usage(`${a} needs a value`);
    opts[m[1]] = value;
  }
  return opts;
}

function usage(why) {
  console.error(`dashboard.mjs: ${why}\nusage: node dashboard.mjs --url URL [--token T] `
    + "--nodes a,b,c --devices a/cpu0,... --screenshot OUT.png [--chromium PATH] "
    + "[--tools DIR] [--timeout S]\n   or: node dashboard.mjs --mock [--screenshot OUT.png]");
  process.exit(2);
}

function skip(why) {
  console.log(`SKIPPED: ${why}`);
  process.exit(SKIP);
}

const list = v => (v ?? "").split(",").map(x => x.trim()).filter(Boolean);
const opts = parseArgs(process.argv.slice(2));
const timeoutMs = 1000 * Number(opts.timeout ?? 120);
if (!(timeoutMs > 0))
  usage("--timeout must be a positive number of seconds");

// puppeteer-core from the test-only tools.
const toolsDir = opts.tools ?? process.env.EXO_TEST_TOOLS
  ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), ".cache"),
               "exo-test-tools");
let puppeteer;
try {
  const entry = createRequire(path.join(toolsDir, "package.json"))
    .resolve("puppeteer-core");
  puppeteer = (await import(pathToFileURL(entry).href)).default;
} catch (err) {
  skip(`puppeteer-core is not in ${toolsDir}/node_modules (${err.code ?? err.message}); `
       + "run scripts/test-tools.sh");
}
const chromium = opts.chromium ?? process.env.CHROMIUM ?? "/usr/bin/chromium";
try {
  fs.accessSync(chromium, fs.constants.X_OK);
} catch {
  skip(`no chromium at ${chromium} (apt install chromium, or pass --chromium)`);
}

let mock = null;
if (opts.mock) {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const m = await import(pathToFileURL(path.join(here, "dashboard_mock.mjs")).href);
  opts.token ??= "mock-secret";
  mock = await m.startMock({ token: opts.token });
  opts.url ??= `http://127.0.0.1:${mock.port}/`;
  opts.nodes ??= m.mockNodes.join(",");
  opts.devices ??= m.mockDevices.join(",");
  opts.screenshot ??= path.join(os.tmpdir(), "exo-dashboard-mock.png");
}
if (!opts.url)
  usage("--url (or --mock) is needed");
const nodes = list(opts.nodes);
const devices = list(opts.devices);
if (!nodes.length)
  usage("--nodes names no node");
const origin = new URL(opts.url).origin;

const problems = [];
let tokenGiven = false; // 401s before the token is entered are expected
let tokenTyped = false;
const expected401 = () => opts.token && !tokenGiven;

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--window-size=1400,900"],
  defaultViewport: { width: 1400, height: 900 },
});
let page;
let watching = true;

async function finish(code, line) {
  watching = false;
  if (page && opts.screenshot) {
    try {
      await page.screenshot({ path: opts.screenshot });
    } catch (err) {
      console.error(`no screenshot: ${err.message}`);
    }
  }
  await browser.close().catch(() => {});
  await mock?.close();
  (code ? console.error : console.log)(line);
  process.exit(code);
}

function fail(why) {
  const extra = problems.length ? `\n  ${problems.join("\n  ")}` : "";
  return finish(1, `FAILED: ${why}${extra}`
    + (opts.screenshot ? `\n  screenshot: ${opts.screenshot}` : ""));
}

try {
  page = await browser.newPage();
  page.on("console", msg => {
    if (!watching)
      return;
    const type = msg.type();
    if (type !== "error" && type !== "warn" && type !== "warning")
      return;
    const text = msg.text();
    if (expected401() && /status of 401/.test(text))
      return;
    const where = msg.location()?.url ? ` (${msg.location().url})` : "";
    problems.push(`console ${type}: ${text}${where}`);
  });
  page.on("pageerror", err => {
    if (watching)
      problems.push(`page error: ${err.message}`);
  });
  page.on("request", req => {
    const url = req.url();
    if (!watching || url.startsWith("data:"))
      return;
    if (new URL(url).origin !== origin)
      problems.push(`request to another origin: ${req.method()} ${url}`);
  });
  page.on("requestfailed", req => {
    if (watching)
      problems.push(`request failed: ${req.method()} ${req.url()}: `
        + `${req.failure()?.errorText ?? "?"}`);
  });
  page.on("response", res => {
    if (!watching || res.status() < 400)
      return;
    if (res.status() === 401 && expected401())
      return;
    problems.push(`HTTP ${res.status()}: ${res.request().method()} ${res.url()}`);
  });

  // Each step (page shown, answer streamed, job shown) has its own timeout.
  let deadline = Date.now() + timeoutMs;
  const left = () => Math.max(1, deadline - Date.now());
  const check = () => {
    if (problems.length)
      throw new Error(problems.shift());
  };
  const visible = async testid =>
    !!(await page.$(`[data-testid="${testid}"]`)
      .then(el => el?.isVisible()).catch(() => false));

  await page.goto(opts.url, { waitUntil: "domcontentloaded", timeout: left() });

  // Every node shown; the token entered on the way when the page asks.
  const wanted = nodes.map(n => `node-${n}`).concat(devices.map(d => `device-${d}`));
  for (;;) {
    check();
    if (await visible("token-input")) {
      if (!opts.token)
        throw new Error("the page asks for an access token; pass --token");
      if (tokenGiven)
        throw new Error("the page refused the token");
      await page.type('[data-testid="token-input"]', opts.token);
      tokenGiven = tokenTyped = true;
      await page.keyboard.press("Enter");
    }
    const missing = [];
    for (const id of wanted) {
      if (!(await visible(id)))
        missing.push(id);
    }
    if (!missing.length)
      break;
    if (Date.now() > deadline)
      throw new Error(`not shown within the timeout: ${missing.join(", ")}`);
    await new Promise(r => setTimeout(r, 250));
  }
  if (opts.token)
    tokenGiven = true;

  // A chat message, its answer streamed to the end.
  deadline = Date.now() + timeoutMs;
  await page.waitForFunction(
    () => document.querySelector("#chat-model")?.value, { timeout: left() });
  await page.type('[data-testid="chat-input"]', "Say hello");
  await page.click('[data-testid="chat-send"]');
  const answerEl = await page.waitForSelector(
    '[data-testid="chat-answer"][data-done="true"]', { timeout: left() })
    .catch(() => { throw new Error("no finished chat answer within the timeout"); });
  const answer = await answerEl.evaluate(el => ({
    text: (el.firstChild?.nodeType === Node.TEXT_NODE ? el.firstChild.data : ""),
    error: el.dataset.error === "true" ? el.textContent : "",
  }));
  if (answer.error)
    throw new Error(`the chat answer is an error: ${answer.error}`);
  if (!answer.text.trim())
    throw new Error("the chat answer is empty");
  check();

  // A job whose placement names a device.
  deadline = Date.now() + timeoutMs;
  const job = await page.waitForFunction(devs => {
    for (const j of document.querySelectorAll('[data-testid^="job-"]')) {
      const stages = [...j.querySelectorAll('[data-testid="stage"]')];
      const named = stages.filter(st => devs.some(d => st.textContent.includes(d)));
      if (named.length) {
        return { id: j.dataset.testid, stages: stages.length,
                 where: named.map(st => st.querySelector(".where")?.textContent ?? "") };
      }
    }
    return null;
  }, { timeout: left(), polling: 250 }, devices.length ? devices : [""])
    .then(h => h.jsonValue())
    .catch(() => { throw new Error("no job with a stage row naming a device"); });

  // The node that backs the job up (another member: it would take the job
  // over if the coordinator were lost), and whether it is ready to.
  deadline = Date.now() + timeoutMs;
  const backup = await page.waitForFunction((id, names) => {
    const row = document.querySelector(`[data-testid="${id}"] [data-testid="backup"]`);
    const text = row?.textContent ?? "";
    return names.some(n => text === `backup ${n}` || text.startsWith(`backup ${n} · `))
      ? text : null;
  }, { timeout: left(), polling: 250 }, job.id, nodes)
    .then(h => h.jsonValue())
    .catch(() => { throw new Error("the job's backup is not shown"); });

  // The device stages the job ran on, each naming its device (kept after
  // the job: keep_alive), with the figures of its batches.
  deadline = Date.now() + timeoutMs;
  const stageRows = await page.waitForFunction(devs => {
    const rows = [...document.querySelectorAll('[data-testid^="stage-"]')];
    const named = rows.filter(r => devs.some(d => r.textContent.includes(d))
                                   && r.textContent.includes("rows/fwd")
                                   && r.textContent.includes("wait ")
                                   && r.textContent.includes("KV "));
    return named.length ? named.length : null;
  }, { timeout: left(), polling: 250 }, devices.length ? devices : [""])
    .then(h => h.jsonValue())
    .catch(() => { throw new Error("no device stage row naming a device"); });

  // Let pending requests settle, then look for late problems.
  await new Promise(r => setTimeout(r, 500));
  check();
  const events = await page.$$eval('[data-testid="events-log"] > li', els => els.length);
  const live = await page.$eval("#live", el => el.textContent).catch(() => "?");
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  await finish(0, `dashboard ok: ${nodes.length} nodes, ${devices.length} devices shown; `
    + `answer of ${answer.text.length} chars (${JSON.stringify(answer.text.slice(0, 40))}…); `
    + `${job.id} with ${job.stages} stages on ${job.where.join(", ")}, ${backup}; `
    + `${stageRows} device stage rows; `
    + `${events} events logged (${live}); `
    + `token ${tokenTyped ? "entered" : "not asked for"}; no console errors; ${seconds} s; `
    + `screenshot ${opts.screenshot ?? "(none)"}`);
} catch (err) {
  await fail(err.message);
}
