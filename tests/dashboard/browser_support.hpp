// Helpers of the dashboard's browser tests: a real headless Chromium driven
// through the DevTools protocol (CDP) over a Boost.Beast websocket.
//
//   chromium_process  `chromium --headless` in a process group of its own,
//                     with a fresh profile dir; the destructor ends the whole
//                     group, reaps it and removes the dir, whatever the test did
//   cdp_connection    the browser's websocket: one command at a time, its
//                     answer matched by id (events are skipped)
//   browser_page      one tab (Target.createTarget, flat session): navigate,
//                     evaluate, wait for DOM state, click like a mouse, type,
//                     screenshot
//
// Waiting: every read from the browser and every wait for DOM state has a
// generous guard (hang_guard) so a broken page fails the test instead of
// hanging it; the guard is never what a test asserts.
#pragma once

#include <utility>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/beast/websocket.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server_test_support.hpp"

namespace delayq::dashboard_test {

using namespace delayq::server_test;
namespace websocket = boost::beast::websocket;

/// The browser to run: $DELAYQ_CHROMIUM, else `chromium` from PATH (Debian's
/// package; scripts/common.sh installs it).
inline std::string chromium_binary() {
  const char* b = std::getenv("DELAYQ_CHROMIUM");
  return b && *b ? b : "chromium";
}

/// Headless Chromium with remote debugging on a free port. The constructor
/// waits for the `DevTools listening on ws://...` line on its stderr.
/// Thread safety: one thread uses it; its reader thread only touches the
/// members under mu_.
class chromium_process {
 public:
  chromium_process() {
    int err[2];
    if (::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    // A group of its own: the browser's helper processes (zygote, renderer,
    // GPU) are ended with it. SIGPIPE back to the default (the test ignores it).
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);

    const std::string bin = chromium_binary();
    std::vector<std::string> args{
        bin, "--headless",
        // The sandbox needs user namespaces or a setuid helper, which root in
        // a container has neither of; the page is our own, on loopback.
        "--no-sandbox", "--disable-gpu",
        "--disable-dev-shm-usage",  // containers often have a tiny /dev/shm
        "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
        "--user-data-dir=" + profile_.path(), "--no-first-run", "--no-default-browser-check",
        "--disable-extensions", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--mute-audio", "--hide-scrollbars", "--window-size=1280,1000",
        "about:blank"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int e = ::posix_spawnp(&pid_, bin.c_str(), &fa, &attr, argv.data(), environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    ::close(err[1]);
    if (e != 0) {
      ::close(err[0]);
      throw std::runtime_error("cannot start " + bin + ": " + std::strerror(e) +
                               " (install Debian's chromium: apt-get install chromium, or see "
                               "DELAYQ_BUILD_DEPS in scripts/common.sh; DELAYQ_CHROMIUM names "
                               "another binary)");
    }
    reader_ = std::thread([this, fd = err[0]] { read_stderr(fd); });

    std::unique_lock lock(mu_);
    const bool told = cv_.wait_for(lock, hang_guard, [&] { return !ws_url_.empty() || eof_; });
    const bool listening = !ws_url_.empty();
    lock.unlock();
    if (!listening) {
      // No destructor runs for an object whose constructor threw: end it here.
      const std::string why =
          told ? "exited before it listened" : "did not print its DevTools line";
      stop();
      throw std::runtime_error("chromium " + why + "; stderr:\n" + tail());
    }
  }

  ~chromium_process() { stop(); }
  chromium_process(const chromium_process&) = delete;
  chromium_process& operator=(const chromium_process&) = delete;

  /// The browser's websocket, `ws://127.0.0.1:PORT/devtools/browser/ID`.
  std::string ws_url() const {
    std::lock_guard lock(mu_);
    return ws_url_;
  }

  /// The last characters of its stderr, for failure messages.
  std::string tail(std::size_t n = 3000) const {
    std::lock_guard lock(mu_);
    return err_.size() > n ? "..." + err_.substr(err_.size() - n) : err_;
  }

 private:
  void stop() {
    // SIGTERM to the browser alone: it ends its helpers and reaps them (a
    // signal to the whole group would leave them to init, as zombies);
    // SIGKILL to the group if anything is left after a few seconds.
    ::kill(pid_, SIGTERM);
    int status = 0;
    bool reaped = false;
    for (int i = 0; i < 250 && !reaped; ++i) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      reaped = r == pid_ || (r < 0 && errno != EINTR);
      if (!reaped) std::this_thread::sleep_for(20ms);
    }
    ::kill(-pid_, SIGKILL);  // stragglers of the group, if any
    if (!reaped)
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    if (reader_.joinable()) reader_.join();  // EOF once the whole group is gone
  }

  void read_stderr(int fd) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      std::lock_guard lock(mu_);
      err_.append(buf, static_cast<std::size_t>(n));
      if (ws_url_.empty()) {
        static constexpr std::string_view marker = "DevTools listening on ";
        const auto at = err_.find(marker);
        const auto end = at == std::string::npos ? at : err_.find('\n', at);
        if (end != std::string::npos) {
          ws_url_ = err_.substr(at + marker.size(), end - at - marker.size());
          while (!ws_url_.empty() && std::isspace(static_cast<unsigned char>(ws_url_.back())))
            ws_url_.pop_back();
        }
      }
      cv_.notify_all();
    }
    ::close(fd);
    std::lock_guard lock(mu_);
    eof_ = true;
    cv_.notify_all();
  }

  temp_dir profile_;  // removed after the browser is gone (declared first)
  pid_t pid_ = -1;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string err_;
  std::string ws_url_;
  bool eof_ = false;
  std::thread reader_;
};

/// The DevTools websocket of the browser. Not thread-safe: one per thread.
class cdp_connection {
 public:
  explicit cdp_connection(const std::string& ws_url) : ws_(ioc_) {
    // ws://HOST:PORT/PATH
    constexpr std::string_view scheme = "ws://";
    if (!ws_url.starts_with(scheme)) throw std::runtime_error("not a ws:// url: " + ws_url);
    const std::string rest = ws_url.substr(scheme.size());
    const auto slash = rest.find('/');
    const std::string hostport = rest.substr(0, slash);
    const std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
    const auto colon = hostport.rfind(':');
    const auto port = static_cast<std::uint16_t>(std::stoul(hostport.substr(colon + 1)));
    ws_.next_layer().connect(
        tcp::endpoint(asio::ip::make_address(hostport.substr(0, colon)), port));
    ws_.read_message_max(256u << 20);  // screenshots arrive as one message
    beast::error_code ec;
    bool done = false;
    ws_.async_handshake(hostport, path, [&](beast::error_code e) {
      ec = e;
      done = true;
    });
    run_guarded(done, "the DevTools handshake");
    if (ec) throw std::runtime_error("DevTools handshake failed: " + ec.message());
  }

  /// Sends `method` (to `session` when given) and returns its `result`.
  /// Throws on a protocol error or when no answer comes within the guard.
  json call(const std::string& method, json params = json::object(),
            const std::string& session = {}) {
    const int id = next_id_++;
    json msg{{"id", id}, {"method", method}, {"params", std::move(params)}};
    if (!session.empty()) msg["sessionId"] = session;
    const std::string text = msg.dump();
    beast::error_code ec;
    bool done = false;
    ws_.async_write(asio::buffer(text), [&](beast::error_code e, std::size_t) {
      ec = e;
      done = true;
    });
    run_guarded(done, method);
    if (ec) throw std::runtime_error("DevTools write failed: " + ec.message());
    for (;;) {
      beast::flat_buffer buf;
      done = false;
      ws_.async_read(buf, [&](beast::error_code e, std::size_t) {
        ec = e;
        done = true;
      });
      run_guarded(done, method);
      if (ec) throw std::runtime_error("DevTools read failed: " + ec.message());
      json answer = json::parse(beast::buffers_to_string(buf.data()), nullptr, false);
      if (!answer.is_object() || !answer.contains("id") || answer["id"] != id) continue;  // events
      if (answer.contains("error"))
        throw std::runtime_error(method + " failed: " + answer["error"].dump());
      return answer.value("result", json::object());
    }
  }

 private:
  // Runs the io_context until `done`; on the guard closes the socket (which
  // ends the pending operation) and throws.
  void run_guarded(const bool& done, const std::string& what) {
    ioc_.restart();
    const auto end = std::chrono::steady_clock::now() + hang_guard;
    while (!done) {
      const auto left = end - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero() || ioc_.run_one_for(left) == 0) {
        beast::error_code ignored;
        ws_.next_layer().close(ignored);
        ioc_.restart();
        ioc_.poll();  // let the cancelled handler run before `done` goes out of scope
        throw std::runtime_error("no answer from the browser to " + what);
      }
    }
  }

  asio::io_context ioc_;
  websocket::stream<tcp::socket> ws_;
  int next_id_ = 1;
};

/// Decodes standard base64 (CDP sends screenshots that way).
inline std::string base64_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) continue;  // padding, line breaks
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  return out;
}

/// One tab of the browser, attached with a flat session.
class browser_page {
 public:
  explicit browser_page(cdp_connection& cdp) : cdp_(cdp) {
    target_ = cdp_.call("Target.createTarget", {{"url", "about:blank"}})["targetId"];
    session_ =
        cdp_.call("Target.attachToTarget", {{"targetId", target_}, {"flatten", true}})["sessionId"];
    call("Page.enable");
    call("Runtime.enable");
  }
  ~browser_page() {
    try {
      cdp_.call("Target.closeTarget", {{"targetId", target_}});
    } catch (...) {  // the browser is ended by its owner anyway
    }
  }
  browser_page(const browser_page&) = delete;
  browser_page& operator=(const browser_page&) = delete;

  json call(const std::string& method, json params = json::object()) {
    return cdp_.call(method, std::move(params), session_);
  }

  void navigate(const std::string& url) {
    auto r = call("Page.navigate", {{"url", url}});
    if (r.contains("errorText"))
      throw std::runtime_error("navigating to " + url + " failed: " + r["errorText"].dump());
  }

  /// Evaluates `js` in the page and returns its value (JSON). Throws with the
  /// page's message when it throws.
  json eval(const std::string& js) {
    auto r = call("Runtime.evaluate",
                  {{"expression", js}, {"returnByValue", true}, {"awaitPromise", true}});
    if (r.contains("exceptionDetails"))
      throw std::runtime_error("page threw on `" + js + "`: " + r["exceptionDetails"].dump());
    const json& v = r["result"];
    return v.contains("value") ? v["value"] : json(nullptr);
  }

  /// Polls `js` until it is truthy; false on the guard (DOM state has no
  /// event the test could wait on over CDP without more machinery).
  bool wait_for(const std::string& js) {
    return eventually([&] {
      try {
        const json v = eval("!!(" + js + ")");
        return v.is_boolean() && v.get<bool>();
      } catch (const std::exception&) {
        return false;  // mid-navigation: the context is being replaced
      }
    });
  }

  /// Clicks the centre of the first element matching `selector_js` (an
  /// expression giving the element) with real mouse events, after scrolling
  /// it into view: a covered or hidden button is not clicked.
  void click(const std::string& element_js) {
    const json box = eval("(() => { const e = " + element_js +
                          "; if (!e) return null; e.scrollIntoView({block: 'center'});"
                          " const r = e.getBoundingClientRect();"
                          " return {x: r.left + r.width / 2, y: r.top + r.height / 2,"
                          " w: r.width, h: r.height}; })()");
    if (!box.is_object()) throw std::runtime_error("no element to click: " + element_js);
    if (box["w"].get<double>() <= 0 || box["h"].get<double>() <= 0)
      throw std::runtime_error("element to click is not visible: " + element_js);
    const double x = box["x"].get<double>(), y = box["y"].get<double>();
    call("Input.dispatchMouseEvent", {{"type", "mouseMoved"}, {"x", x}, {"y", y}});
    for (const char* type : {"mousePressed", "mouseReleased"})
      call("Input.dispatchMouseEvent",
           {{"type", type}, {"x", x}, {"y", y}, {"button", "left"}, {"clickCount", 1}});
  }

  /// Types `text` into the focused element, as a keyboard would.
  void type(const std::string& text) { call("Input.insertText", {{"text", text}}); }

  /// A PNG of the whole page.
  std::string screenshot_png() {
    const json size = call("Page.getLayoutMetrics")["cssContentSize"];
    json clip{
        {"x", 0}, {"y", 0}, {"width", size["width"]}, {"height", size["height"]}, {"scale", 1}};
    auto r = call("Page.captureScreenshot",
                  {{"format", "png"}, {"captureBeyondViewport", true}, {"clip", clip}});
    return base64_decode(r["data"].get<std::string>());
  }

 private:
  cdp_connection& cdp_;
  std::string target_;
  std::string session_;
};

/// A JS expression: the row of `table_body` whose data-KEY is `id`.
inline std::string row_js(const std::string& body_id, const std::string& data_key,
                          const std::string& id) {
  return "[...document.querySelectorAll('#" + body_id + " tr')].find(r => r.dataset." + data_key +
         " === " + json(id).dump() + ")";
}

}  // namespace delayq::dashboard_test
