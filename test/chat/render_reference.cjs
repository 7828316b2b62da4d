// Renders chat templates with the reference renderer, @huggingface/jinja
// (the test-only tool in $EXO_TEST_TOOLS), for the chat-template tests.
// Usage: node render_reference.cjs CASES.json OUT.json
// CASES.json: {"templates": {name: source}, "cases": [{"template": name,
// "vars": {...}}]}. OUT.json: [{"ok": true, "text": ...} |
// {"ok": false, "error": ...}], one per case.
"use strict";
const fs = require("fs");
const path = require("path");

const tools = process.env.EXO_TEST_TOOLS;
if (!tools) {
  console.error("EXO_TEST_TOOLS is not set");
  process.exit(77);
}
const { Template } = require(path.join(tools, "node_modules", "@huggingface", "jinja"));

const input = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const compiled = {};
const results = input.cases.map((c) => {
  try {
    if (!(c.template in compiled)) {
      compiled[c.template] = new Template(input.templates[c.template]);
    }
    return { ok: true, text: compiled[c.template].render(c.vars) };
  } catch (e) {
    return { ok: false, error: String(e && e.message ? e.message : e) };
  }
});
fs.writeFileSync(process.argv[3], JSON.stringify(results));
