// A stand-in for a gateway in front of a 3-node cluster, for developing the
// dashboard and for `node dashboard.mjs --mock`: serves the dashboard's files
// from runtime/gateway/dashboard/ with the gateway's CSP and fakes the API the
// page uses: GET /v1/cluster, GET /v1/models, a streaming POST
// /v1/chat/completions (which runs a fake job with a placement) and the
// WebSocket /v1/events. Node's built-in modules only.
//
//   node dashboard_mock.mjs [--port N] [--token T]
//
// With --token every API call needs `Authorization: Bearer T` (the WebSocket
// the subprotocol `bearer.T`) and is answered 401 otherwise; the files are
// served without it, as the gateway does.
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../runtime/gateway/dashboard");
const csp = "default-src 'self'; connect-src 'self' ws: wss:; "
  + "img-src 'self' data:";
const files = {
  "/": ["index.html", "text/html; charset=utf-8"],
  "/index.html": ["index.html", "text/html; charset=utf-8"],
  "/app.js": ["app.js", "text/javascript; charset=utf-8"],
  "/style.css": ["style.css", "text/css; charset=utf-8"],
};
const model = "llama-3.2-1b-instruct";
const GiB = 1024 ** 3;

export const mockNodes = ["alpha", "beta", "gamma"];
export const mockDevices = ["alpha/cpu0", "beta/cpu0", "beta/cuda0",
                            "gamma/cpu0", "gamma/vulkan0"];

/// Starts the mock; resolves to { port, close() }.
export function startMock({ port = 0, token = "" } = {}) {
  const state = makeCluster();
  const sockets = new Set();
  let nextJob = 1;
  let auditSeq = 1;

  function broadcast(type, data) {
    const frame = textFrame(JSON.stringify({ type, time_ms: Date.now(), data }));
    for (const s of sockets)
      s.write(frame);
  }
  function audit(event, detail) {
    broadcast("audit", { seq: auditSeq++, event, principal: "mock-user",
                         detail });
  }

  // Temperatures drift so the page has something live to show.
  const ticker = setInterval(() => {
    for (const t of state.thermal.filter(x => x.has_temperature)) {
      const busy = state.jobs.some(j => j.stages.some(
        s => s.node === t.node && s.device === t.device));
      t.temp_c = Math.max(35, Math.min(t.limit_c - 1,
        t.temp_c + (busy ? 1.5 : -0.5) + (Math.random() - 0.5)));
      t.predicted_c = t.temp_c + (busy ? 6 : 1);
      t.time_to_limit_s = busy ? Math.round((t.limit_c - t.temp_c) * 8) : -1;
      t.state = t.temp_c > t.limit_c - 8 ? "warm" : "normal";
      broadcast("thermal", t);
    }
  }, 1000);

  function authorized(req) {
    return !token || req.headers.authorization === `Bearer ${token}`;
  }

  function runJob(res, body) {
    const id = nextJob++;
    const dev = (n, d) => state.devices.find(x => x.node === n && x.id === d);
    const job = {
      job: id, model: body.model, tokens: 0, cancelling: false,
      state: "running", backup: "gamma", backup_ready: true,
      stages: [{ node: "beta", device: "cuda0", first_layer: 0, last_layer: 9 },
               { node: "gamma", device: "vulkan0", first_layer: 10,
                 last_layer: 15 }],
    };
    state.jobs.push(job);
    // The device stages the job's layers run on (kept after it, as exo's
    // are for keep_alive): their users, sequences, KV blocks and batches.
    const stages = job.stages.map(s => {
      let st = state.stages.find(x => x.node === s.node && x.device === s.device
                                      && x.first === s.first_layer);
      if (!st) {
        st = { node: s.node, device: s.device, model: "d0804fd7562d",
               first: s.first_layer, last: s.last_layer + 1, kv_type: "f16",
               jobs: 0, sequences: 0, kv_bytes: 0, kv_blocks: 64,
               kv_blocks_used: 0, kv_blocks_shared: 0, kv_block_positions: 32,
               forwards: 0, rows: 0, merged_steps: 0,
               wait_le: [0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025,
                         0.05, 0.1, 0.25, 0.5, 1],
               wait_counts: new Array(13).fill(0), wait_sum_s: 0 };
        state.stages.push(st);
      }
      st.jobs += 1;
      st.sequences += 1;
      st.kv_blocks_used += 2;
      st.kv_bytes += 2 * 32 * 4096;
      return st;
    });
    for (const s of job.stages) {
      const d = dev(s.node, s.device);
      d.free_memory -= 1.25 * GiB;
      d.state = "busy";
      broadcast("device", d);
    }
    broadcast("job", job);
    broadcast("placement", { job: id, stages: job.stages });
    audit("completion.admitted", `job ${id} model ${body.model}`);

    const last = body.messages?.at(-1)?.content ?? "";
    const words = (`Hello! You said "${last}". I am a mock of exo's gateway, `
      + "answering one word at a time so the dashboard can show tokens per "
      + "second, the placement of this job and its events.").split(/(?= )/);
    const max = Math.min(body.max_tokens ?? 64, words.length);
    const created = Math.floor(Date.now() / 1000);
    const chunk = (delta, finish) => "data: " + JSON.stringify({
      id: `chatcmpl-${id}`, object: "chat.completion.chunk", created, model,
      choices: [{ index: 0, delta, finish_reason: finish }] }) + "\n\n";
    res.writeHead(200, { "content-type": "text/event-stream",
                         "cache-control": "no-cache" });
    res.write(chunk({ role: "assistant", content: "" }, null));
    let i = 0;
    let ended = false;
    const finish = (jobState) => {
      if (ended)
        return;
      ended = true;
      clearInterval(step);
      clearInterval(report);
      job.state = jobState;
      state.jobs = state.jobs.filter(j => j !== job);
      for (const st of stages) {
        st.jobs -= 1;
        st.sequences -= 1;
        st.kv_blocks_used -= 2;
        st.kv_bytes -= 2 * 32 * 4096;
      }
      for (const s of job.stages) {
        const d = dev(s.node, s.device);
        d.free_memory += 1.25 * GiB;
        d.state = "ready";
        broadcast("device", d);
      }
      broadcast("job", job);
      audit("completion." + jobState, `job ${id}: ${job.tokens} tokens`);
    };
    const step = setInterval(() => {
      if (i < max) {
        res.write(chunk({ content: words[i++] }, null));
        job.tokens = i;
        for (const st of stages) {
          st.forwards += 1;
          st.rows += 1;
          st.wait_counts[3] += 1; // waited 1.5 ms for its batch
          st.wait_sum_s += 0.0015;
        }
        return;
      }
      res.write(chunk({}, i < words.length ? "length" : "stop"));
      res.end("data: [DONE]\n\n");
      finish("finished");
    }, 60);
    const report = setInterval(() => broadcast("job", job), 1000);
    res.on("close", () => finish("cancelled"));
  }

  function api(req, res, body) {
    const json = (status, value) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(value));
    };
    const error = (status, message, type) =>
      json(status, { error: { message, type, code: null } });
    if (!authorized(req)) {
      audit("auth.refused", `${req.method} ${req.url}`);
      return error(401, "missing or invalid bearer token",
                   "authentication_error");
    }
    if (req.method === "GET" && req.url === "/v1/cluster")
      return json(200, { node: "alpha", coordinator: "alpha", ...state,
                         models: [{ id: model, object: "model",
                                    owned_by: "exo" }] });
    if (req.method === "GET" && req.url === "/v1/models")
      return json(200, { object: "list", data: [{ id: model, object: "model",
                                                  owned_by: "exo" }] });
    if (req.method === "POST" && req.url === "/v1/chat/completions") {
      let parsed;
      try {
        parsed = JSON.parse(body);
      } catch {
        return error(400, "the body is not JSON", "invalid_request_error");
      }
      if (parsed.model !== model)
        return error(404, `unknown model ${parsed.model}`,
                     "invalid_request_error");
      if (!parsed.stream)
        return error(400, "the mock only streams", "invalid_request_error");
      return runJob(res, parsed);
    }
    return error(404, `no route ${req.method} ${req.url}`,
                 "invalid_request_error");
  }

  const server = http.createServer((req, res) => {
    const file = req.method === "GET" && files[req.url];
    if (file) {
      let body;
      try {
        body = fs.readFileSync(path.join(root, file[0]));
      } catch (err) {
        res.writeHead(500, { "content-type": "text/plain" });
        res.end(`cannot read ${file[0]}: ${err.message}\n`);
        return;
      }
      res.writeHead(200, { "content-type": file[1],
                           "content-security-policy": csp,
                           "cache-control": "no-store" });
      res.end(body);
      return;
    }
    const parts = [];
    req.on("data", c => parts.push(c));
    req.on("end", () => api(req, res, Buffer.concat(parts).toString()));
  });

  server.on("upgrade", (req, socket) => {
    const protocols = (req.headers["sec-websocket-protocol"] ?? "")
      .split(",").map(p => p.trim());
    const key = req.headers["sec-websocket-key"];
    if (req.url !== "/v1/events" || !key || !protocols.includes("exo.v1")) {
      socket.end("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    if (token && !protocols.includes(`bearer.${token}`)) {
      socket.end("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    const accept = crypto.createHash("sha1")
      .update(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
    socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
      + "Connection: Upgrade\r\nSec-WebSocket-Protocol: exo.v1\r\n"
      + `Sec-WebSocket-Accept: ${accept}\r\n\r\n`);
    sockets.add(socket);
    let pending = Buffer.alloc(0);
    socket.on("data", data => {
      pending = Buffer.concat([pending, data]);
      // Client frames are masked; only close and ping matter here.
      while (pending.length >= 2) {
        const opcode = pending[0] & 0x0f;
        let len = pending[1] & 0x7f;
        let at = 2;
        if (len === 126) { len = pending.readUInt16BE(2); at = 4; }
        else if (len === 127) { len = Number(pending.readBigUInt64BE(2)); at = 10; }
        if (pending.length < at + 4 + len)
          return;
        const mask = pending.subarray(at, at + 4);
        const payload = Buffer.from(pending.subarray(at + 4, at + 4 + len))
          .map((b, k) => b ^ mask[k % 4]);
        pending = pending.subarray(at + 4 + len);
        if (opcode === 0x8) {
          socket.end(frame(0x8, payload));
          sockets.delete(socket);
        } else if (opcode === 0x9) {
          socket.write(frame(0xa, payload));
        }
      }
    });
    const drop = () => sockets.delete(socket);
    socket.on("close", drop);
    socket.on("error", drop);
    broadcast("node", { ...state.nodes[0], change: "status" });
  });

  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve({
      port: server.address().port,
      /// Cuts every events socket, as a restarting gateway would.
      dropSockets() {
        for (const s of sockets)
          s.destroy();
        sockets.clear();
      },
      close() {
        clearInterval(ticker);
        for (const s of sockets)
          s.destroy();
        server.closeAllConnections();
        return new Promise(r => server.close(r));
      },
    }));
  });
}

function frame(opcode, payload) {
  const len = payload.length;
  const head = len < 126 ? Buffer.from([0x80 | opcode, len])
    : len < 65536 ? Buffer.from([0x80 | opcode, 126, len >> 8, len & 0xff])
    : Buffer.concat([Buffer.from([0x80 | opcode, 127]),
                     (() => { const b = Buffer.alloc(8);
                              b.writeBigUInt64BE(BigInt(len)); return b; })()]);
  return Buffer.concat([head, payload]);
}

function textFrame(text) {
  return frame(0x1, Buffer.from(text));
}

function makeCluster() {
  const node = (name, port, devices) => ({
    name, host: "127.0.0.1", port, status: "alive", incarnation: 1, devices,
    reason: "" });
  const device = (node, id, backend, name, total, free, simulated = false) => ({
    node, id, backend, name, simulated, total_memory: total * GiB,
    free_memory: free * GiB, state: "ready" });
  const link = (from, to, p50, bw) => ({
    from, to, rtt_p50_us: p50, rtt_p99_us: p50 * 3.1, jitter_us: p50 / 7,
    loss: 0, bandwidth_bps: bw });
  const thermal = (node, device, temp, limit) => ({
    node, device, has_temperature: true, temp_c: temp, predicted_c: temp + 1,
    limit_c: limit, time_to_limit_s: -1, state: "normal" });
  return {
    nodes: [node("alpha", 7101, 1), node("beta", 7102, 2),
            node("gamma", 7103, 2)],
    devices: [
      device("alpha", "cpu0", "cpu", "AMD EPYC 7B13 (2 cores)", 16, 11.2),
      device("beta", "cpu0", "cpu", "Intel Xeon Platinum 8481C", 32, 27.5),
      device("beta", "cuda0", "cuda", "NVIDIA H100 80GB HBM3", 80, 71.3, true),
      device("gamma", "cpu0", "cpu", "Apple M2 Max", 24, 15.9),
      device("gamma", "vulkan0", "vulkan", "AMD Radeon RX 7900 XTX", 24, 22.1,
             true),
    ],
    links: [link("alpha", "beta", 180, 9.4e9), link("beta", "alpha", 185, 9.3e9),
            link("alpha", "gamma", 420, 1.1e9), link("gamma", "alpha", 410, 1.1e9),
            link("beta", "gamma", 260, 2.4e9), link("gamma", "beta", 270, 2.4e9)],
    thermal: [
      { node: "alpha", device: "cpu0", has_temperature: false, temp_c: 0,
        predicted_c: 0, limit_c: 0, time_to_limit_s: -1, state: "normal" },
      thermal("beta", "cuda0", 52, 87), thermal("gamma", "cpu0", 61, 100),
      thermal("gamma", "vulkan0", 48, 90),
    ],
    jobs: [],
    stages: [],
  };
}

if (process.argv[1] && fileURLToPath(import.meta.url)
      === path.resolve(process.argv[1])) {
  const args = process.argv.slice(2);
  const opt = name => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const mock = await startMock({ port: Number(opt("--port") ?? 0),
                                 token: opt("--token") ?? "" });
  console.log(`dashboard mock on http://127.0.0.1:${mock.port}/`);
}
