// One streaming completion of the soak (soak_bench.cpp) with the official
// OpenAI client, as a client of a cluster behind several gateways would
// make it: it starts on the first URL; when the stream breaks (the node
// was killed or stopped) it resumes the completion on the next URL with
// its id (X-Exo-Resume) and the bytes of text it has (Last-Event-ID), and
// so on round the list until the stream ends with a finish_reason. A
// request the first node could not take (nothing listening) goes to the
// next one as a new request; so does one whose stream broke before its
// first chunk (no id to resume by).
//
//   node soak_stream.mjs TOOLS_DIR URLS_JSON REQUEST_JSON
//
// URLS_JSON: the gateways' base URLs ("http://127.0.0.1:PORT/v1"), the
// first one first. REQUEST_JSON: the body of a streamed /v1/completions
// request, plus "again": true to read the whole stream again from byte 0
// once it ended (through the URLs, resuming the same way) and require the
// same text: the check of a sampled request without a seed, whose text
// has no reference. Prints one line "result: {JSON}" with text, id,
// finish, breaks, resumes and notes (why each stream broke); exit 0 when
// it finished (the caller compares the text), 1 with the reason when a
// resume was refused, a stream never finished within the deadline, or
// the text read again differed. Its resumes count those of the stream
// only, not the requests that read it again.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [toolsDir, urlsJson, requestJson] = process.argv.slice(2);
const urls = JSON.parse(urlsJson);
const { again, ...request } = JSON.parse(requestJson);
request.stream = true;
const { default: OpenAI, APIConnectionError } = await import(
  pathToFileURL(path.join(toolsDir, "node_modules/openai/index.mjs")).href);
const clients = urls.map((baseURL) => new OpenAI({
  baseURL, apiKey: "none", maxRetries: 0, timeout: 300000,
}));
const deadline = Date.now() + 8 * 60 * 1000;
const notes = [];
let breaks = 0, resumes = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function fail(why) {
  console.log("result: " + JSON.stringify({ breaks, resumes, notes }));
  console.error(`FAILED: ${why}`);
  process.exit(1);
}

// Streams the completion to its end through the gateways, starting at
// URL `at`: with `id`, resuming it after the bytes of `text` it has
// (`reading`: the stream read again, its requests not counted).
// Returns { text, id, finish }.
async function complete(id, text, at, reading = false) {
  let finish = null;
  for (let i = at;; ++i) {
    if (Date.now() > deadline)
      fail(`no finish within the deadline (${notes.join("; ")})`);
    const client = clients[i % clients.length];
    const headers = id === null ? {} : {
      "X-Exo-Resume": id,
      "Last-Event-ID": String(Buffer.byteLength(text, "utf8")),
    };
    let stream;
    try {
      stream = await client.completions.create(request, { headers });
    } catch (e) {
      // Nothing listening (the node is down or restarting) or a node
      // that cannot serve now (5xx, 429): the next one, after a breath.
      if (e instanceof APIConnectionError || e?.status >= 500
          || e?.status === 429) {
        notes.push(`${urls[i % urls.length]}: ${e?.status ?? ""} ` +
                   `${e?.message ?? e}`.slice(0, 160));
        await sleep(300);
        continue;
      }
      fail(`${id === null ? "the request" : "the resume of " + id} was ` +
           `refused by ${urls[i % urls.length]}: ${e?.status ?? ""} ` +
           `${e?.message ?? e}`);
    }
    if (id !== null && !reading)
      ++resumes;
    reading = false; // the read's later requests are resumes
    try {
      for await (const chunk of stream) {
        id = chunk.id ?? id;
        const ch = chunk.choices?.[0];
        if (ch?.text)
          text += ch.text;
        if (ch?.finish_reason)
          finish = ch.finish_reason;
      }
      if (finish)
        return { text, id, finish };
      notes.push(`${urls[i % urls.length]}: ended without a finish_reason`);
    } catch (e) {
      notes.push(`${urls[i % urls.length]}: ${e?.message ?? e}`.slice(0, 160));
    }
    ++breaks;
    if (id === null)
      text = ""; // broke before its first chunk: a new request
  }
}

const done = await complete(null, "", 0);
if (again) {
  const read = await complete(done.id, "", 1, true);
  if (read.text !== done.text)
    fail(`read again from its start the stream of ${done.id} has ` +
         `${Buffer.byteLength(read.text, "utf8")} bytes differing from ` +
         `the ${Buffer.byteLength(done.text, "utf8")} put together`);
}
console.log("result: " + JSON.stringify({ ...done, breaks, resumes, notes }));
