// The official OpenAI client against `exo-node serve --https --auth
// access_token`: it trusts the cluster CA (NODE_EXTRA_CA_CERTS, set by the
// test), lists and completes with a user token, and gets the errors its
// users would: PermissionDeniedError (403) for a monitor token,
// AuthenticationError (401) for a token that is not exo's.
//
//   node https_client.mjs TOOLS_DIR BASE_URL USER_TOKEN MONITOR_TOKEN
//
// Exit 0 when every check holds, 1 with the reason otherwise.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [toolsDir, baseURL, userToken, monitorToken] = process.argv.slice(2);
const { default: OpenAI } = await import(
  pathToFileURL(path.join(toolsDir, "node_modules/openai/index.mjs")).href);

function check(cond, what) {
  if (!cond) {
    console.error("FAILED: " + what);
    process.exit(1);
  }
  console.log("ok: " + what);
}

const client = (apiKey) =>
  new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });

const models = [];
for await (const m of client(userToken).models.list())
  models.push(m.id);
check(models.includes("tiny"), "a user token lists the models over HTTPS");

const done = await client(userToken).completions.create({
  model: "tiny", prompt: "Once upon a time", max_tokens: 4, temperature: 0,
});
check(done.usage.completion_tokens === 4 && done.choices[0].text.length > 0,
      "a user token completes over HTTPS");

async function refused(apiKey, status, name) {
  try {
    await client(apiKey).models.list();
  } catch (e) {
    check(e.status === status && e.constructor.name === name,
          `${name} (${status}) for a refused token: ${e.message}`);
    return;
  }
  check(false, `a ${status} for a refused token`);
}
await refused(monitorToken, 403, "PermissionDeniedError");
await refused("sk-not-an-exo-token", 401, "AuthenticationError");
console.log("all checks passed");
