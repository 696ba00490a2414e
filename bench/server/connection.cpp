// connection.cpp - the stream, the HTTP connection and the two protocol clients.
#include "connection.hpp"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace delayq::bench_server {

namespace {

constexpr std::size_t initial_buffer = 64 * 1024;

std::uint64_t to_u64(std::string_view s, const char* what) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || s.empty()) {
    throw std::runtime_error(std::string("bad number in ") + what + ": '" + std::string(s) + "'");
  }
  return v;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

tcp::endpoint endpoint_of(const target& t) { return {asio::ip::make_address(t.host), t.port}; }

// ---------------------------------------------------------------------------
// beanstalkd: doc/protocol.txt of beanstalkd 1.12.

class beanstalk_client final : public queue_client {
 public:
  beanstalk_client(const target& t, asio::any_io_executor ex)
      : ep_(endpoint_of(t)), stream_(std::move(ex)) {}

  asio::awaitable<void> connect() override { co_await stream_.connect(ep_); }

  asio::awaitable<void> put(const std::string& type, std::string_view payload,
                            std::int64_t delay_ms) override {
    if (used_ != type) {
      co_await command("use " + type + "\r\n", "USING " + type);
      used_ = type;
    }
    const std::int64_t delay_s = (std::max<std::int64_t>(delay_ms, 0) + 500) / 1000;
    req_.clear();
    req_ += "put 1024 ";
    req_ += std::to_string(delay_s);
    req_ += " 60 ";
    req_ += std::to_string(payload.size());
    req_ += "\r\n";
    req_ += payload;
    req_ += "\r\n";
    co_await stream_.write(req_);
    const std::string_view line = co_await stream_.read_until("\r\n");
    if (line.substr(0, 9) != "INSERTED ") throw unexpected("put", line);
  }

  asio::awaitable<bool> reserve(const std::string& type, int wait_ms, job& out) override {
    if (watched_ != type) {
      co_await command("watch " + type + "\r\n", "WATCHING 2");
      co_await command("ignore " + watched_ + "\r\n", "WATCHING 1");
      watched_ = type;
    }
    const int wait_s = (std::max(wait_ms, 0) + 999) / 1000;
    for (;;) {
      req_ = "reserve-with-timeout " + std::to_string(wait_s) + "\r\n";
      co_await stream_.write(req_);
      const std::string_view line = co_await stream_.read_until("\r\n");
      if (line == "TIMED_OUT") co_return false;
      if (line == "DEADLINE_SOON") continue;  // a job of ours nears its ttr: ask again
      if (line.substr(0, 9) != "RESERVED ") throw unexpected("reserve-with-timeout", line);
      const std::string_view rest = line.substr(9);
      const std::size_t sp = rest.find(' ');
      if (sp == std::string_view::npos) throw unexpected("reserve-with-timeout", line);
      out.id.assign(rest.substr(0, sp));
      const std::uint64_t bytes = to_u64(rest.substr(sp + 1), "RESERVED");
      const std::string_view data = co_await stream_.read_exact(bytes + 2);
      out.payload.assign(data.substr(0, bytes));
      out.lease.clear();
      co_return true;
    }
  }

  asio::awaitable<void> remove(const job& j) override {
    req_ = "delete " + j.id + "\r\n";
    co_await stream_.write(req_);
    const std::string_view line = co_await stream_.read_until("\r\n");
    if (line != "DELETED") throw unexpected("delete " + j.id, line);
  }

  void close() noexcept override { stream_.close(); }

 private:
  asio::awaitable<void> command(std::string cmd, std::string expect) {
    co_await stream_.write(cmd);
    const std::string_view line = co_await stream_.read_until("\r\n");
    if (line != expect) throw unexpected(cmd.substr(0, cmd.size() - 2), line);
  }

  static std::runtime_error unexpected(const std::string& what, std::string_view got) {
    return std::runtime_error("beanstalkd: " + what + " answered '" + std::string(got) + "'");
  }

  tcp::endpoint ep_;
  stream stream_;
  std::string used_ = "default";
  std::string watched_ = "default";
  std::string req_;
};

// ---------------------------------------------------------------------------
// delayq-server: docs/server.md, HTTP/1.1 keep-alive, JSON bodies.

// Ids and types in a path: everything but RFC 3986's unreserved characters
// percent-encoded.
std::string percent_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += ch;
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

class delayq_client final : public queue_client {
 public:
  delayq_client(const target& t, asio::any_io_executor ex) : conn_(t, std::move(ex)) {}

  asio::awaitable<void> connect() override { co_await conn_.connect(); }

  asio::awaitable<void> put(const std::string& type, std::string_view payload,
                            std::int64_t delay_ms) override {
    // The benchmark's types and payloads are plain ASCII letters and digits:
    // nothing to escape, so the body is written without a JSON library.
    body_.clear();
    body_ += R"({"type":")";
    body_ += type;
    body_ += R"(","payload":")";
    body_ += payload;
    body_ += R"(","delay_ms":)";
    body_ += std::to_string(delay_ms);
    body_ += '}';
    const http_response r = co_await request("/v1/tasks", body_);
    if (r.status != 201) throw unexpected("POST /v1/tasks", r);
  }

  asio::awaitable<bool> reserve(const std::string& type, int wait_ms, job& out) override {
    body_ = R"({"types":[")" + type + R"("],"max":1,"wait_ms":)" + std::to_string(wait_ms) +
            R"(,"ttr_ms":30000})";
    const http_response r = co_await request("/v1/reserve", body_);
    if (r.status != 200) throw unexpected("POST /v1/reserve", r);
    const auto doc = nlohmann::json::parse(r.body, nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("tasks") ||
        !doc["tasks"].is_array()) {
      throw unexpected("POST /v1/reserve (not {\"tasks\": [...]})", r);
    }
    const auto& tasks = doc["tasks"];
    if (tasks.empty()) co_return false;
    const auto& t = tasks[0];
    out.id = t.at("id").get<std::string>();
    out.lease = t.at("lease").get<std::string>();
    out.payload = t.value("payload", std::string());
    co_return true;
  }

  asio::awaitable<void> remove(const job& j) override {
    body_ = nlohmann::json{{"lease", j.lease}}.dump();
    const std::string path = "/v1/tasks/" + percent_encode(j.id) + "/finish";
    const http_response r = co_await request(path, body_);
    if (r.status != 204) throw unexpected("POST " + path, r);
  }

  void close() noexcept override { conn_.close(); }

 private:
  asio::awaitable<http_response> request(std::string_view path, std::string_view body) {
    co_return co_await conn_.request("POST", path, body);
  }

  static std::runtime_error unexpected(const std::string& what, const http_response& r) {
    return std::runtime_error("delayq-server: " + what + " answered " + std::to_string(r.status) +
                              " " + r.body.substr(0, 200));
  }

  http_connection conn_;
  std::string body_;
};

}  // namespace

target parse_target(std::string_view spec) {
  target t;
  const std::size_t eq = spec.find('=');
  if (eq == 0 || eq == std::string_view::npos) {
    throw std::invalid_argument("expected NAME=beanstalk://HOST:PORT or NAME=http://HOST:PORT");
  }
  t.name = std::string(spec.substr(0, eq));
  std::string_view url = spec.substr(eq + 1);
  if (url.substr(0, 12) == "beanstalk://") {
    t.proto = target::protocol::beanstalk;
    url.remove_prefix(12);
  } else if (url.substr(0, 7) == "http://") {
    t.proto = target::protocol::delayq;
    url.remove_prefix(7);
  } else {
    throw std::invalid_argument("'" + std::string(url) + "': not beanstalk:// or http://");
  }
  if (!url.empty() && url.back() == '/') url.remove_suffix(1);
  const std::size_t colon = url.rfind(':');
  if (colon == std::string_view::npos) throw std::invalid_argument("no port in the target URL");
  t.host = std::string(url.substr(0, colon));
  std::uint64_t port = 0;
  const std::string_view p = url.substr(colon + 1);
  const auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc{} || ptr != p.data() + p.size() || port == 0 || port > 65535) {
    throw std::invalid_argument("bad port '" + std::string(p) + "'");
  }
  t.port = static_cast<std::uint16_t>(port);
  boost::system::error_code ec2;
  asio::ip::make_address(t.host, ec2);
  if (ec2) throw std::invalid_argument("'" + t.host + "': give an IP address, e.g. 127.0.0.1");
  return t;
}

stream::stream(asio::any_io_executor ex) : socket_(std::move(ex)), buf_(initial_buffer) {}

asio::awaitable<void> stream::connect(const tcp::endpoint& ep) {
  close();
  begin_ = end_ = 0;
  co_await socket_.async_connect(ep, asio::use_awaitable);
  socket_.set_option(tcp::no_delay(true));
}

asio::awaitable<void> stream::write(std::string_view data) {
  co_await asio::async_write(socket_, asio::buffer(data.data(), data.size()), asio::use_awaitable);
}

asio::awaitable<void> stream::fill() {
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (end_ == buf_.size()) {
    if (begin_ > 0) {  // move what is left to the front
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    } else {
      buf_.resize(buf_.size() * 2);
    }
  }
  const std::size_t n = co_await socket_.async_read_some(
      asio::buffer(buf_.data() + end_, buf_.size() - end_), asio::use_awaitable);
  end_ += n;
}

asio::awaitable<std::string_view> stream::read_until(std::string_view delim) {
  std::size_t searched = 0;  // bytes after begin_ known to hold no delimiter start
  for (;;) {
    const std::string_view have(buf_.data() + begin_, end_ - begin_);
    const std::size_t at = have.find(delim, searched);
    if (at != std::string_view::npos) {
      begin_ += at + delim.size();
      co_return have.substr(0, at);
    }
    // Offsets are relative to begin_, which compaction keeps pointing at the
    // same byte: what was searched stays searched.
    searched = have.size() >= delim.size() ? have.size() - delim.size() + 1 : 0;
    co_await fill();
  }
}

asio::awaitable<std::string_view> stream::read_exact(std::size_t n) {
  if (buf_.size() < n) buf_.resize(std::max(n, buf_.size() * 2));
  while (end_ - begin_ < n) {
    if (buf_.size() - begin_ < n) {  // not enough room behind begin_: compact first
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    co_await fill();
  }
  const std::string_view out(buf_.data() + begin_, n);
  begin_ += n;
  co_return out;
}

void stream::close() noexcept {
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

http_connection::http_connection(const target& t, asio::any_io_executor ex)
    : ep_(endpoint_of(t)), stream_(std::move(ex)) {
  host_header_ = "Host: " + t.host + ":" + std::to_string(t.port) + "\r\n";
  if (!t.token.empty()) auth_header_ = "Authorization: Bearer " + t.token + "\r\n";
}

asio::awaitable<void> http_connection::connect() { co_await stream_.connect(ep_); }

asio::awaitable<http_response> http_connection::request(std::string_view method,
                                                        std::string_view path,
                                                        std::string_view body) {
  if (!stream_.is_open()) {  // the server closed the last one: a new connection
    co_await stream_.connect(ep_);
    ++reconnects_;
  }
  req_.clear();
  req_ += method;
  req_ += ' ';
  req_ += path;
  req_ += " HTTP/1.1\r\n";
  req_ += host_header_;
  req_ += auth_header_;
  req_ += "Content-Type: application/json\r\nContent-Length: ";
  req_ += std::to_string(body.size());
  req_ += "\r\n\r\n";
  req_ += body;
  co_await stream_.write(req_);
  http_response r = co_await read_response();
  if (r.close) stream_.close();
  co_return r;
}

asio::awaitable<http_response> http_connection::read_response() {
  http_response r;
  std::size_t length = 0;
  bool chunked = false;
  {
    const std::string_view head = co_await stream_.read_until("\r\n\r\n");
    // "HTTP/1.1 201 Created"
    if (head.size() < 12 || head.substr(0, 5) != "HTTP/") {
      throw std::runtime_error("delayq-server: not an HTTP answer: '" +
                               std::string(head.substr(0, 80)) + "'");
    }
    r.status = static_cast<int>(to_u64(head.substr(9, 3), "the status line"));
    std::size_t p = head.find("\r\n");
    while (p != std::string_view::npos) {
      const std::size_t q = head.find("\r\n", p + 2);
      const std::string_view line =
          head.substr(p + 2, q == std::string_view::npos ? std::string_view::npos : q - p - 2);
      p = q;
      const std::size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string_view name = line.substr(0, colon);
      const std::string_view value = trim(line.substr(colon + 1));
      if (iequals(name, "content-length")) {
        length = to_u64(value, "Content-Length");
      } else if (iequals(name, "transfer-encoding")) {
        chunked = iequals(value, "chunked");
      } else if (iequals(name, "connection")) {
        r.close = iequals(value, "close");
      }
    }
  }
  if (!chunked) {
    if (length > 0) r.body.assign(co_await stream_.read_exact(length));
    co_return r;
  }
  for (;;) {  // chunk-size [;ext] CRLF data CRLF ... 0 CRLF [trailers] CRLF
    const std::string_view size_line = co_await stream_.read_until("\r\n");
    std::size_t n = 0;
    const std::string_view hex = size_line.substr(0, size_line.find(';'));
    const auto [ptr, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), n, 16);
    if (ec != std::errc{}) throw std::runtime_error("delayq-server: bad chunk size");
    if (n == 0) {
      while (!(co_await stream_.read_until("\r\n")).empty()) {
      }
      co_return r;
    }
    r.body += co_await stream_.read_exact(n);
    co_await stream_.read_exact(2);
  }
}

std::unique_ptr<queue_client> make_client(const target& t, asio::any_io_executor ex) {
  if (t.proto == target::protocol::beanstalk) {
    return std::make_unique<beanstalk_client>(t, std::move(ex));
  }
  return std::make_unique<delayq_client>(t, std::move(ex));
}

}  // namespace delayq::bench_server
