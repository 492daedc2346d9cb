// The console in a real browser: headless Debian chromium driven by playwright-core, against
// a real scheduler and worker processes that integration-tests/tests/console.rs started and
// brought into shape (an invoice story with a crash, an approval waiting, a run blocked on an
// in-doubt email). Each check names what it looked at; a screenshot of every page goes to
// $SHOTS. Exits non-zero on the first failed check (with a screenshot of the page then).
//
// Environment: BASE (the scheduler's URL), STORY, APPROVAL, DOUBT (thread ids), DOUBT_KEY
// (the in-doubt effect key), SHOTS (a folder), CHROMIUM (default /usr/bin/chromium).

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const BASE = env("BASE");
const SHOTS = env("SHOTS");
const [STORY, APPROVAL, DOUBT, DOUBT_KEY] = ["STORY", "APPROVAL", "DOUBT", "DOUBT_KEY"].map(env);
mkdirSync(SHOTS, { recursive: true });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  // Debian's chromium as root in a sandbox-less container, on a machine without a network:
  // no sandbox, no GPU, nothing that phones home.
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
const consoleErrors = [];
page.on("pageerror", (e) => consoleErrors.push(String(e)));
page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));

let step = "start";
const shot = (name) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
const ok = (what) => console.log(`ok - ${what}`);
async function check(name, body) {
  step = name;
  await body();
  ok(name);
}
const api = async (path) => {
  const r = await fetch(BASE + path);
  return [r.status, await r.json()];
};
async function until(what, fn, ms = 20000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}`);
}

try {
  await check("the runs list shows the story run with counts by status", async () => {
    await page.goto(`${BASE}/ui`);
    await page.locator(`tr.run[data-thread="${STORY}"]`).waitFor();
    const completed = await page.locator('a.chip[data-status="completed"] .count').innerText();
    assert.ok(Number(completed) >= 1, `completed count ${completed}`);
    const waiting = await page.locator('a.chip[data-status="waiting"] .count').innerText();
    assert.ok(Number(waiting) >= 1, `waiting count ${waiting}`);
    assert.match(await page.locator("#updated").innerText(), /updated \d\d:\d\d:\d\d UTC/);
    await shot("01-runs");
    // Live: a run started elsewhere appears without a reload (the page polls every 5 s).
    const r = await fetch(`${BASE}/v1/runs`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ workflow: "approval", input: {}, thread_id: `${APPROVAL}-live` }),
    });
    assert.equal(r.status, 201, await r.text());
    await page.locator(`tr.run[data-thread="${APPROVAL}-live"]`).waitFor({ timeout: 15000 });
    // The status filter narrows the list to one status.
    await page.locator('a.chip[data-status="blocked"]').click();
    await page.locator(`tr.run[data-thread="${DOUBT}"]`).waitFor();
    assert.equal(await page.locator(`tr.run[data-thread="${STORY}"]`).count(), 0, "the completed run is filtered out");
  });

  await check("the story run's timeline shows the crash, the takeover and one email", async () => {
    await page.goto(`${BASE}/ui/runs/${STORY}`);
    assert.equal(await page.locator("#run-status").innerText(), "completed");
    const crash = page.locator("#timeline .mark-label.crash");
    assert.equal(await crash.count(), 1, "one takeover marked");
    assert.match(await crash.innerText(), /^crash: a1-\S+ died, b-\S+ took over$/);
    assert.equal(await page.locator('#timeline .bar-row[data-name="email.send"]').count(), 1, "one email bar");
    assert.equal(await page.locator('#timeline .bar-row[data-name="email.send"]').getAttribute("data-state"), "done");
    const ledger = page.locator('#timeline .bar-row[data-name="ledger.post"]');
    assert.equal(await ledger.count(), 1, "one ledger bar");
    assert.match(await ledger.getAttribute("data-state"), /already applied/, "the ledger post was found applied, not repeated");
    assert.match(await page.locator("#timeline").innerText(), new RegExp(`email:${STORY}`), "the email's key is shown");
    assert.match(await page.locator("#doctor .summary").innerText(), /^Completed/);
    await shot("02-run-story");
  });

  await check("a bad answer (invalid JSON) in the inbox shows an error and changes nothing", async () => {
    await page.goto(`${BASE}/ui/inbox`);
    const card = page.locator(`article.question[data-thread="${APPROVAL}"]`);
    await card.waitFor();
    assert.match(await card.locator(".payload").innerText(), /Approve this payment\?/);
    await card.locator("textarea.answer").fill("{approved: yes");
    await card.locator("button.answer-send").click();
    const err = card.locator(".result.error");
    await err.waitFor();
    assert.match(await err.innerText(), /^Not valid JSON .*Nothing was sent\.$/);
    assert.equal(await card.locator("textarea.answer").getAttribute("aria-invalid"), "true");
    await shot("03-inbox-bad-answer");
    const [, run] = await api(`/v1/runs/${APPROVAL}`);
    assert.equal(run.status, "waiting", "the run still waits");
    const [, hist] = await api(`/v1/runs/${APPROVAL}/history`);
    assert.ok(!hist.events.some((e) => e.type === "resumed"), "nothing was delivered");
  });

  await check("an error the API answers is shown next to the button (an answer to a run cancelled meanwhile: 409)", async () => {
    const live = `${APPROVAL}-live`;
    const card = page.locator(`article.question[data-thread="${live}"]`);
    await card.locator("textarea.answer").fill('"too late"');
    const r = await fetch(`${BASE}/v1/runs/${live}/cancel`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ reason: "cancelled by the browser test" }),
    });
    assert.equal(r.status, 200, await r.text());
    await card.locator("button.answer-send").click();
    const err = card.locator(".result.error");
    await err.waitFor();
    assert.match(await err.innerText(), /^409: .*cancelled/);
    assert.equal((await api(`/v1/runs/${live}`))[1].status, "cancelled");
    await card.locator("textarea.answer").fill("");
  });

  await check("a waiting run's page says what it waits on; Pause asks for a note and pauses the run", async () => {
    await page.goto(`${BASE}/ui/runs/${APPROVAL}`);
    const waitingOn = page.locator("dt", { hasText: /^waiting on$/ }).locator("xpath=following-sibling::dd[1]");
    assert.match(await waitingOn.innerText(), /^human: Waiting for a human to answer the interrupt/);
    const again = page.locator("dt", { hasText: /^runs again$/ }).locator("xpath=following-sibling::dd[1]");
    assert.match(await again.innerText(), /^unknown: when someone answers/);
    await page.locator('button.act[data-path$="/pause"]').click();
    await page.locator("dialog#confirm").waitFor({ state: "visible" });
    await page.locator("#confirm-reason").fill("paused by the browser test");
    await page.locator("#confirm-yes").click();
    const done = page.locator('.action:has(button.act[data-path$="/pause"]) .result.ok');
    await done.waitFor();
    assert.match(await done.innerText(), /^Done \(200\)/);
    const [, run] = await api(`/v1/runs/${APPROVAL}`);
    assert.equal(run.pause.note, "paused by the browser test", JSON.stringify(run));
    assert.equal(run.waiting.on, "paused", JSON.stringify(run));
    await shot("03b-run-paused");
    const r = await fetch(`${BASE}/v1/runs/${APPROVAL}/unpause`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ note: "the browser test goes on" }),
    });
    assert.equal(r.status, 200, await r.text());
    await page.goto(`${BASE}/ui/inbox`);
  });

  await check("an approval answered from the inbox completes the run", async () => {
    const card = page.locator(`article.question[data-thread="${APPROVAL}"]`);
    await card.locator("textarea.answer").fill('"approved by the browser test"');
    await card.locator("button.answer-send").click();
    const done = card.locator(".result.ok");
    await done.waitFor();
    assert.match(await done.innerText(), /^Done \(202\)/);
    const run = await until("the approval to complete", async () => {
      const [, r] = await api(`/v1/runs/${APPROVAL}`);
      return r.status === "completed" && r;
    });
    assert.deepEqual(run.output, { log: ["first", "gate=approved by the browser test"] });
    await page.goto(`${BASE}/ui/inbox`);
    assert.equal(await page.locator(`article.question[data-thread="${APPROVAL}"]`).count(), 0, "gone from the inbox");
    await shot("04-inbox-answered");
  });

  await check("needs attention lists the in-doubt email; cancelling asks first and 'keep it' changes nothing", async () => {
    await page.goto(`${BASE}/ui/attention`);
    const card = page.locator(`article.trouble[data-thread="${DOUBT}"]`);
    await card.waitFor();
    assert.match(await card.innerText(), new RegExp(DOUBT_KEY.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")));
    assert.match(await card.locator(".summary").innerText(), /an effect's outcome is unknown/);
    await card.locator("button.act", { hasText: "Cancel run" }).click();
    const dialog = page.locator("dialog#confirm");
    await dialog.waitFor({ state: "visible" });
    assert.match(await page.locator("#confirm-text").innerText(), /Cancel the run/);
    await shot("05-attention-confirm");
    await page.locator("#confirm-no").click();
    await card.locator(".result", { hasText: "Not done" }).waitFor();
    const [, run] = await api(`/v1/runs/${DOUBT}`);
    assert.equal(run.status, "blocked", "still blocked after 'keep it'");
  });

  await check("an invalid result for resolve is refused in the page; a valid one resolves the effect", async () => {
    const card = page.locator(`article.trouble[data-thread="${DOUBT}"]`);
    const applied = card.locator(".action", { has: page.locator("button", { hasText: "Resolve: applied" }) });
    await applied.locator("textarea.action-value").fill("{sent: ");
    await applied.locator("button.act").click();
    await applied.locator(".result.error").waitFor();
    assert.equal((await api(`/v1/runs/${DOUBT}`))[1].status, "blocked", "nothing was sent");
    await applied.locator("textarea.action-value").fill(JSON.stringify({ sent: DOUBT_KEY }));
    await applied.locator("button.act").click();
    await page.locator("dialog#confirm").waitFor({ state: "visible" });
    await page.locator("#confirm-yes").click();
    const done = applied.locator(".result.ok");
    await done.waitFor();
    assert.match(await done.innerText(), /^Done \(202\): run is pending, effect applied/);
    await shot("06-attention-resolved");
    const run = await until("the resolved run to complete", async () => {
      const [, r] = await api(`/v1/runs/${DOUBT}`);
      return r.status === "completed" && r;
    });
    assert.equal(run.status, "completed");
  });

  await check("the fleet page lists the live workers with their heartbeats and health", async () => {
    await page.goto(`${BASE}/ui/fleet`);
    const b2 = page.locator("tr.worker", { hasText: "b2-" });
    await b2.waitFor();
    assert.match(await b2.innerText(), /ok \(http:\/\/127\.0\.0\.1:\d+\)/, "b2 answers /healthz");
    assert.match(await b2.locator("td.build").innerText(), /^\S+ \(engine \d+\.\d+\.\d+(, contract [0-9a-f]{12})?\)$/, "b2's build");
    assert.match(await page.locator("svg.chart").first().innerHTML(), /Steps per second/);
    await shot("07-fleet");
  });

  await check("the pages raised no script errors", async () => {
    // (The 409 the browser logs for the refused answer above is the API's answer, not a fault.)
    const expected = /^Failed to load resource: the server responded with a status of 409/;
    assert.deepEqual(consoleErrors.filter((e) => !expected.test(e)), []);
  });
} catch (e) {
  console.error(`not ok - ${step}: ${e.stack || e}`);
  await shot(`failed-${step.replace(/[^a-z0-9]+/gi, "-").slice(0, 60)}`).catch(() => {});
  await browser.close();
  process.exit(1);
}
await browser.close();
console.log(`screenshots in ${SHOTS}`);
