// The dashboard in a real browser (docs/server.md, "Dashboard"): headless
// Chromium loads the page from a real delayq-server on a SQLite store, the
// test drives it with mouse clicks and typed text over the DevTools
// protocol, and checks what it shows against the API and what it does
// through the API.
//
// DELAYQ_SCREENSHOT=path.png makes the last test write a screenshot of the
// page with realistic data (scripts/dashboard-screenshot.sh makes
// docs/dashboard.png that way).
#include <doctest/doctest.h>

#include <fstream>

#include "browser_support.hpp"

namespace {

using namespace delayq::dashboard_test;

std::string page_url(const server_process& s) {
  return "http://127.0.0.1:" + std::to_string(s.port()) + "/";
}

// The token form is shown; types `token` into it and submits it by a click.
void enter_token(browser_page& page, const std::string& token) {
  REQUIRE(page.wait_for("!document.getElementById('token-form').hidden"));
  page.click("document.getElementById('token-input')");
  page.eval("document.getElementById('token-input').value = ''");
  page.type(token);
  page.click("document.getElementById('token-submit')");
}

std::vector<std::string> dead_ids(http_client& c) {
  auto r = c.get("/v1/dead?limit=1000");
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  std::vector<std::string> ids;
  for (const auto& d : r.body_json["dead"]) ids.push_back(d["id"].get<std::string>());
  return ids;
}

// Makes a dead letter of `id` on a server started with --retry-max 1: one
// attempt, reserved and failed by a consumer.
void make_dead_letter(http_client& c, const std::string& type, const std::string& id,
                      const std::string& payload, const std::string& error) {
  REQUIRE(add_task(c, type, payload, 0, id).status == 201);
  json t = reserve_one(c, {type});
  REQUIRE_MESSAGE(t.is_object(), "no task of type " << type << " was handed out");
  REQUIRE(t["id"] == id);
  auto r = c.post(task_path(id) + "/fail", json{{"lease", t["lease"]}, {"error", error}});
  REQUIRE_MESSAGE(r.status == 204, r.describe());
}

}  // namespace

TEST_CASE("dashboard: asks for the token once, keeps it for the tab, shows a scheduled task") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  http_client c(server->port());
  const std::string id = unique_name("dash-task");
  // A payload that would run a script if the page ever rendered it as HTML.
  const std::string payload = "<img src=x onerror=\"window.__xss=1\">{\"to\":\"a@b.c\"}";
  REQUIRE(add_task(c, "dash-email", payload, 3'600'000, id).status == 201);

  chromium_process browser;
  cdp_connection cdp(browser.ws_url());
  browser_page page(cdp);
  page.navigate(page_url(*server));

  INFO("chromium stderr: " << browser.tail(800));
  // A wrong token is refused and the form says so.
  enter_token(page, "not-the-token");
  REQUIRE(
      page.wait_for("!document.getElementById('token-error').hidden && "
                    "!document.getElementById('token-form').hidden"));
  // The right one is kept and the task shows up, by its id.
  enter_token(page, test_token);
  const std::string row = row_js("upcoming-body", "taskId", id);
  REQUIRE(page.wait_for(row));
  CHECK(page.eval("document.getElementById('token-form').hidden") == true);
  CHECK(page.eval(row + ".cells[1].textContent") == "dash-email");
  // Shown as text, never as markup.
  CHECK(page.eval(row + ".cells[4].textContent") == payload);
  CHECK(page.eval("document.querySelectorAll('#upcoming-body img').length") == 0);
  CHECK(page.eval("window.__xss === undefined") == true);
  REQUIRE(page.wait_for("document.getElementById('health').dataset.state === 'ok'"));
  REQUIRE(
      page.wait_for("document.querySelector('#totals [data-counter=\"pending\"] .value')"
                    ".textContent === '1'"));

  // A reload keeps the token (sessionStorage): no second question. The mark
  // tells the reloaded document from the old one.
  page.eval("window.__old_document = true");
  page.call("Page.reload");
  REQUIRE(
      page.wait_for("window.__old_document === undefined && "
                    "document.getElementById('main').dataset.loaded === 'true'"));
  CHECK(page.eval("document.getElementById('token-form').hidden") == true);
  CHECK(page.eval("!!" + row) == true);

  // Cancel takes two clicks, then the task is gone from the server.
  page.click(row + ".querySelector('button[data-action=\"cancel\"]')");
  REQUIRE(page.wait_for(row + ".querySelector('button[data-action=\"cancel\"]').dataset.armed "
                              "=== 'true'"));
  CHECK(c.get(task_path(id)).status == 200);  // one click did nothing
  page.click(row + ".querySelector('button[data-action=\"cancel\"]')");
  REQUIRE(page.wait_for("!" + row));
  CHECK(c.get(task_path(id)).status == 404);
}

TEST_CASE("dashboard: requeue from the page moves a dead letter back, purge removes another") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store, {"--retry-max", "1"});
  http_client c(server->port());
  const std::string again = unique_name("dash-dead-again");
  const std::string gone = unique_name("dash-dead-gone");
  make_dead_letter(c, "dash-report", again, "{\"month\":\"2026-10\"}", "renderer crashed");
  make_dead_letter(c, "dash-report", gone, "{\"month\":\"2026-09\"}", "no such account");
  REQUIRE(dead_ids(c).size() == 2);

  chromium_process browser;
  cdp_connection cdp(browser.ws_url());
  browser_page page(cdp);
  page.navigate(page_url(*server));
  INFO("chromium stderr: " << browser.tail(800));
  enter_token(page, test_token);

  const std::string again_row = row_js("dead-body", "deadId", again);
  const std::string gone_row = row_js("dead-body", "deadId", gone);
  REQUIRE(page.wait_for(again_row + " && " + gone_row));
  CHECK(page.eval(again_row + ".cells[4].textContent") == "renderer crashed");

  // Requeue: one click; the row goes and the server holds a pending task.
  page.click(again_row + ".querySelector('button[data-action=\"requeue\"]')");
  REQUIRE(page.wait_for("!" + again_row +
                        " || document.getElementById('message').className === "
                        "'error'"));
  CHECK_MESSAGE(page.eval("!" + again_row) == true,
                page.eval("document.getElementById('message').textContent"));
  const auto ids = dead_ids(c);
  CHECK(std::find(ids.begin(), ids.end(), again) == ids.end());
  auto t = c.get(task_path(again));
  REQUIRE_MESSAGE(t.status == 200, t.describe());
  CHECK(t.body_json["attempts"] == 0);
  CHECK(t.body_json["type"] == "dash-report");

  // Purge: two clicks; the dead letter is gone and no task came back.
  const std::string purge = gone_row + ".querySelector('button[data-action=\"purge\"]')";
  page.click(purge);
  REQUIRE(page.wait_for(purge + ".dataset.armed === 'true'"));
  page.click(purge);
  REQUIRE(page.wait_for("!" + gone_row +
                        " || document.getElementById('message').className === "
                        "'error'"));
  CHECK_MESSAGE(page.eval("!" + gone_row) == true,
                page.eval("document.getElementById('message').textContent"));
  CHECK(dead_ids(c).empty());
  CHECK(c.get(task_path(gone)).status == 404);
}

TEST_CASE("dashboard: lists the schedules with their next runs, and removes one") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  http_client c(server->port());
  // An id and a payload that would run a script if rendered as HTML.
  const std::string nightly = "<b>nightly</b>";
  auto r = c.put("/v1/schedules/" + path_escape(nightly),
                 json{{"type", "report"},
                      {"payload", "<img src=x onerror=\"window.__xss=1\">"},
                      {"cron", "0 3 * * *"},
                      {"timezone", "Europe/Berlin"}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  r = c.put("/v1/schedules/hourly", json{{"type", "sync"}, {"every_ms", 3'600'000}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const auto next =
      c.get("/v1/schedules/" + path_escape(nightly) + "?next=3").body_json["next_due_ms"];
  REQUIRE(next.size() == 3);

  chromium_process browser;
  cdp_connection cdp(browser.ws_url());
  browser_page page(cdp);
  page.navigate(page_url(*server));
  INFO("chromium stderr: " << browser.tail(800));
  enter_token(page, test_token);
  const std::string row = row_js("schedules-body", "scheduleId", nightly);
  const std::string hourly = row_js("schedules-body", "scheduleId", "hourly");
  REQUIRE(page.wait_for(row + " && " + hourly));
  CHECK(page.eval(row + ".cells[0].textContent") == nightly);  // text, not markup
  CHECK(page.eval("document.querySelectorAll('#schedules-body b, #schedules-body img').length") ==
        0);
  CHECK(page.eval(row + ".cells[1].textContent") == "report");
  CHECK(page.eval(row + ".cells[2].textContent") == "0 3 * * * (Europe/Berlin)");
  CHECK(page.eval(hourly + ".cells[2].textContent") == "every 1h0m");
  // The next runs are the API's, in order, and say how far off they are.
  CHECK(page.eval("[..." + row +
                  ".querySelectorAll('[data-next-ms]')].map(s => Number(s.dataset.nextMs))") ==
        next);
  CHECK(page.eval(row + ".cells[3].textContent.startsWith('in ')") == true);
  CHECK(page.eval("document.getElementById('schedules-count').textContent") == "(2)");

  // Remove takes two clicks; then the schedule is gone from the server.
  const std::string remove = hourly + ".querySelector('button[data-action=\"remove-schedule\"]')";
  page.click(remove);
  REQUIRE(page.wait_for(remove + ".dataset.armed === 'true'"));
  CHECK(c.get("/v1/schedules/hourly").status == 200);
  page.click(remove);
  REQUIRE(page.wait_for("!" + hourly));
  CHECK(c.get("/v1/schedules/hourly").status == 404);
  CHECK(page.eval("window.__xss === undefined") == true);
}

TEST_CASE("dashboard: counts per type, charts from samples, and a screenshot on request") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store, {"--retry-max", "1"});
  http_client c(server->port());

  // Realistic data: tasks of a few types due over the next hours, two dead
  // letters, and a consumer finishing a trickle of due work while the page
  // samples (throughput and lateness).
  const std::vector<std::pair<std::string, std::string>> upcoming = {
      {"email", "{\"to\":\"ana@example.com\",\"template\":\"welcome\"}"},
      {"email", "{\"to\":\"li@example.com\",\"template\":\"trial-ends\"}"},
      {"report", "{\"account\":4417,\"month\":\"2026-11\"}"},
      {"webhook", "{\"url\":\"https://hooks.example.com/orders\",\"order\":99812}"},
      {"invoice", "{\"customer\":\"c_1042\",\"amount_cents\":129900}"},
      {"email", "{\"to\":\"sam@example.com\",\"template\":\"reminder\"}"},
  };
  std::int64_t delay = 150'000;  // none comes due during the test
  for (std::size_t i = 0; i < upcoming.size(); ++i, delay = delay * 3 + 17'000)
    REQUIRE(add_task(c, upcoming[i].first, upcoming[i].second, delay,
                     upcoming[i].first + "/" + std::to_string(1000 + i))
                .status == 201);
  make_dead_letter(c, "webhook", "webhook/order-99790", "{\"order\":99790}",
                   "push to http://hooks.example.com/orders: 502 Bad Gateway");
  make_dead_letter(c, "invoice", "invoice/c_1017", "{\"customer\":\"c_1017\"}",
                   "card declined (insufficient funds)");

  const char* shot = std::getenv("DELAYQ_SCREENSHOT");
  // Enough samples for the charts to show a shape when a picture is wanted;
  // otherwise two (one rate) are enough to check that they are drawn.
  const int samples = shot && *shot ? 40 : 3;

  std::atomic<bool> stop{false};
  std::thread traffic([&] {
    try {
      http_client w(server->port());
      for (int n = 0; !stop.load(); ++n) {
        const std::string type = n % 3 == 0 ? "email" : n % 3 == 1 ? "report" : "webhook";
        // A few at a time, due within a second, then finished by a consumer.
        for (int k = 0; k < 1 + n % 4; ++k)
          add_task(w, type, "{\"n\":" + std::to_string(n) + "}", 200 + 150 * k);
        auto r = reserve(w, {}, 1000, 10);
        for (const auto& t : reserved_tasks(r))
          w.post(task_path(t["id"].get<std::string>()) + "/finish", json{{"lease", t["lease"]}});
      }
    } catch (const std::exception&) {
      // The server went away: the test's own checks say what failed.
    }
  });
  struct joiner {
    std::atomic<bool>& stop;
    std::thread& t;
    ~joiner() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join_traffic{stop, traffic};

  chromium_process browser;
  cdp_connection cdp(browser.ws_url());
  browser_page page(cdp);
  page.navigate(page_url(*server));
  INFO("chromium stderr: " << browser.tail(800));
  enter_token(page, test_token);
  REQUIRE(page.wait_for("document.getElementById('main').dataset.loaded === 'true'"));

  // Per-type rows when the server reports "types", else one row of totals.
  const bool per_type = c.get("/v1/stats").body_json.contains("types");
  if (per_type) {
    REQUIRE(page.wait_for("document.querySelector('#types-body tr[data-type=\"invoice\"]')"));
  } else {
    CHECK(page.eval("document.getElementById('types-note').hidden") == false);
    CHECK(page.eval("document.querySelector('#types-body tr').dataset.type") == "(all types)");
  }
  CHECK(page.eval("document.querySelectorAll('#dead-body tr').length") == 2);
  REQUIRE(page.wait_for("Number(document.getElementById('chart-throughput').dataset.samples) >= " +
                        std::to_string(samples)));
  // The charts drew lines: some pixels are not transparent.
  CHECK(page.eval("(() => { const c = document.getElementById('chart-throughput');"
                  " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                  " for (let i = 3; i < d.length; i += 4) if (d[i]) return true;"
                  " return false; })()") == true);

  if (shot && *shot) {
    // The list of next due tasks without the trickle's own short-lived ones.
    stop = true;
    traffic.join();
    REQUIRE(
        page.wait_for("[...document.querySelectorAll('#upcoming-body tr')].every("
                      "r => r.dataset.taskId.includes('/'))"));
    const std::string png = page.screenshot_png();
    REQUIRE(png.size() > 8);
    CHECK(png.substr(1, 3) == "PNG");
    std::ofstream(shot, std::ios::binary) << png;
    MESSAGE("screenshot written to " << std::string(shot));
  }
}
