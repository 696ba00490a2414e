// fuzz_server_request: arbitrary bytes through what delayq-server does with a
// request before the engine sees it: Beast's HTTP parser with the server's
// limits and the header checks of server/src/api/request_guard.hpp (token,
// Host, Origin, media type), then every JSON body parser of
// server/src/wire/request_codec.hpp, the path decoding and the query string
// (wire/http_url.hpp);
// and a peer's answer to a part of a split batch (api/batch_split.hpp).
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

#include "api/batch_split.hpp"
#include "api/request_guard.hpp"
#include "wire/http_url.hpp"
#include "wire/request_codec.hpp"

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
  if (p.is_header_done()) {
    // The checks made before a body is read: with a token and without (then
    // Host and Origin decide). A refusal is a 4xx with a name and a message.
    static const request_guard with_token(
        guard_options{"fuzz-token", boost::asio::ip::make_address("127.0.0.1"), {"example.test"}});
    static const request_guard without_token(
        guard_options{"", boost::asio::ip::make_address("::1"), {}});
    for (const request_guard* g : {&with_token, &without_token}) {
      const auto refusal = g->check(p.get().base());
      if (refusal) check(!refusal->name.empty() && !refusal->message.empty());
      if (refusal)
        check(refusal->status == 401 || refusal->status == 403 || refusal->status == 415);
    }
    (void)request_guard::host_of(
        std::string_view(bytes.data(), std::min<std::size_t>(bytes.size(), 300)));
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
      // The body as a PUT /v1/schedules body: a form the parser lets
      // through is either refused by check_schedule() with a field and a
      // reason, or has occurrences that only go forward.
      delayq::schedule sch;
      if (!parse_schedule(j, "fuzz", sch)) {
        if (auto p = delayq::check_schedule(sch)) {
          check(!p->field.empty() && !p->reason.empty());
        } else {
          boost::system::error_code sec;
          const auto next = delayq::schedule_occurrences(sch, delayq::from_epoch_ms(0), 3, sec);
          check(!sec);
          for (std::size_t k = 1; k < next.size(); ++k) check(next[k - 1] < next[k]);
        }
      }
      std::string out;
      (void)percent_decode(body, out);
      (void)query_param(body, "limit");
      // The body as a peer's answer to a part of a split batch: any bytes
      // make a 201 with exactly the batch's ids, or an error that says so.
      const std::vector<batch_part> parts{{"peer", {0, 2}}, {"", {1}}};
      http_answer peer;
      peer.status = 201 + (data[0] / 10) % 4 * 100;  // 201, 301, 401, 501
      peer.body = std::string(body);
      http_answer here;
      here.status = 201;
      here.body = R"({"ids":["h"]})";
      const http_answer a = join_batch_answers(3, parts, {peer, here});
      const auto j = nlohmann::json::parse(a.body, nullptr, false);
      check(j.is_object());
      if (a.status == 201) check(j["ids"].size() == 3 && j["ids"][1] == "h");
      if (a.status != 201) check(a.status >= 400 && a.status < 600 && j["ids"][1] == "h");
      break;
    }
  }
  return 0;
}
