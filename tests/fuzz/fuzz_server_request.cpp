// fuzz_server_request: arbitrary bytes through what delayq-server does with a
// request before the engine sees it: Beast's HTTP parser with the server's
// limits, then every JSON body parser of server/src/api/request_codec.hpp,
// the path decoding and the query string.
//
// Checked: nothing throws and nothing overflows (ASan/UBSan); a refusal is a
// 4xx with a name and a message; what a parser accepts is within the limits
// docs/server.md states; a due time is computed without overflow.

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "api/request_codec.hpp"

namespace {

using namespace delayq::server;

void check(bool ok) {
  if (!ok) std::abort();
}

void check_error(const std::optional<api_error>& e) {
  if (!e) return;
  check(e->status >= 400 && e->status < 500);
  check(!e->name.empty() && !e->message.empty());
}

void check_when(const when_spec& w) {
  check(w.delay_ms.has_value() != w.due_ms.has_value());
  (void)w.due(std::chrono::system_clock::now());  // UBSan: no overflow on any input
}

void parse_http(std::string_view bytes) {
  boost::beast::http::request_parser<boost::beast::http::string_body> p;
  p.header_limit(8 << 10);
  p.body_limit(64 << 10);
  p.eager(true);
  boost::system::error_code ec;
  std::size_t used = 0;
  while (!ec && used < bytes.size() && !p.is_done()) {
    const std::size_t n = p.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    if (n == 0) break;
    used += n;
  }
  if (p.is_done()) {
    const auto& req = p.get();
    const std::string_view target(req.target().data(), req.target().size());
    std::string out;
    (void)percent_decode(target, out);
    (void)query_param(target, "offset");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const unsigned which = data[0] % 10;
  if (which == 9) {
    parse_http(body);
    return 0;
  }
  nlohmann::json j;
  auto e = parse_json(body, j, which % 2 == 0);
  check_error(e);
  if (e) return 0;
  switch (which) {
    case 0: {
      add_request r;
      e = parse_add(j, r);
      check_error(e);
      if (!e) check_when(r.when);  // the type and id are the engine's to check
      if (!e) check(r.trigger_count <= max_trigger_count);
      break;
    }
    case 1: {
      std::vector<add_request> rs;
      e = parse_batch(j, rs);
      check_error(e);
      if (!e) {
        check(!rs.empty() && rs.size() <= max_batch);
        for (const auto& r : rs) check_when(r.when);
      }
      break;
    }
    case 2: {
      when_spec w;
      e = parse_when(j, w);
      check_error(e);
      if (!e) check_when(w);
      break;
    }
    case 3: {
      reserve_request r;
      e = parse_reserve(j, r);
      check_error(e);
      if (!e) {
        check(r.max >= 1 && r.max <= max_reserve);
        check(r.wait.count() >= 0 && r.wait <= max_wait);
        check(r.ttr >= min_ttr && r.ttr <= max_ttr);
        for (const auto& t : r.types) check(!t.empty());
      }
      break;
    }
    case 4:
    case 5:
    case 6: {
      lease_request r;
      e = which == 4 ? parse_finish(j, r) : which == 5 ? parse_fail(j, r) : parse_touch(j, r);
      check_error(e);
      if (!e && r.ttr) check(*r.ttr >= min_ttr && *r.ttr <= max_ttr);
      break;
    }
    case 7: {
      std::chrono::milliseconds d{0};
      e = parse_requeue(j, d);
      check_error(e);
      if (!e) check(d.count() >= 0);
      std::uint32_t n = 0;
      e = parse_signal(j, n);
      check_error(e);
      if (!e) check(n >= 1 && n <= max_trigger_count);
      break;
    }
    default: {
      std::string out;
      (void)percent_decode(body, out);
      (void)query_param(body, "limit");
      break;
    }
  }
  return 0;
}
