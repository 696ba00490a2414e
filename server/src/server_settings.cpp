#include "server_settings.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <ostream>

#include "delayq/open_store.hpp"
#include "delayq/postgres_store.hpp"
#include "delayq/redis_store.hpp"
#include "push/push_policy.hpp"
#include "security/ip_block.hpp"
#include "setting_values.hpp"
#include "wire/http_url.hpp"

namespace delayq::server {
namespace {

using std::chrono::milliseconds;

// ------------------------------------------------------------------ values

// Where one value came from, for error messages and --print-config.
enum class source { preset, file, environment, flag };

struct origin {
  source from = source::preset;
  std::string name;  // the flag ("--tick"), the variable, or "FILE:LINE"
  std::string dir;   // a config file's folder: relative paths in it start there
};

// --log-level's values, in log_level's order: one list for reading and showing.
constexpr std::string_view log_level_names[] = {"debug", "info", "warning", "error"};

std::string relative_to(const origin& at, const std::string& path) {
  if (path.empty() || path.front() == '/' || at.dir.empty()) return path;
  return at.dir + "/" + path;
}

// ------------------------------------------------------------------ the table

enum class kind { value, list, toggle };

struct setting {
  std::string_view key;  // in the file; the flag is "--" + key with '-' for '_'
  kind k = kind::value;
  std::string_view type;  // what --help shows for the value
  std::string_view help;
  std::string_view env;    // the variable that gives it, or empty
  std::string_view group;  // settings that give one value (token, token_file), or empty
  bool secret = false;     // masked by --print-config
  bool needs_cluster = false;
  // Checks one value and stores it (a list: appends it). Throws config_error
  // with a message that does not say where the value came from.
  void (*apply)(server_config& c, const std::string& text, const origin& at);
  // The value in effect, one string each (a list: several; none: empty).
  std::vector<std::string> (*show)(const server_config& c);
};

std::vector<std::string> one(std::string s) { return {std::move(s)}; }
std::vector<std::string> number(std::uint64_t n) { return {std::to_string(n)}; }

bool is_postgres_uri(const std::string& uri) {
  return uri.starts_with("postgres://") || uri.starts_with("postgresql://");
}

// The store URI without a password (redis_options::describe(),
// postgres_options::describe()). One that does not parse is shown as given:
// check_store() refuses it before anything prints it.
std::string shown_store(const std::string& uri) {
  boost::system::error_code ec;
  if (is_postgres_uri(uri)) {
    const postgres_options o = postgres_options::parse(uri, ec);
    return ec ? uri : o.describe();
  }
  if (!(uri.starts_with("redis://") || uri.starts_with("unix://") ||
        uri.starts_with("redis-cluster://")))
    return uri;
  const redis_options o = redis_options::parse(uri, ec);
  return ec || o.password.empty() ? uri : o.describe();
}

void check_store(const std::string& uri) {
  if (uri.starts_with("redis://") || uri.starts_with("unix://") ||
      uri.starts_with("redis-cluster://")) {
    boost::system::error_code ec;
    std::string why;
    redis_options::parse(uri, ec, &why);
    if (ec) throw config_error(why.empty() ? ec.message() : why);
  } else if (is_postgres_uri(uri)) {
    boost::system::error_code ec;
    std::string why;
    postgres_options::parse(uri, ec, &why);
    if (ec) throw config_error(why.empty() ? ec.message() : why);
  } else if (uri.starts_with("sqlite:")) {
    if (uri.size() == 7)
      throw config_error("sqlite: wants a file, e.g. sqlite:/var/lib/delayq/tasks.db");
  } else if (uri != "memory:") {
    throw config_error("\"" + uri +
                       "\" is not a store URI: redis://HOST:PORT/DB, unix:///SOCKET, "
                       "redis-cluster://HOST:PORT,..., postgres://USER:PASSWORD@HOST:PORT/DB, "
                       "sqlite:FILE or memory:");
  }
}

void check_listen_spec(const std::string& spec) {
  if (spec.starts_with("unix:")) {
    if (spec.size() == 5 || spec.size() - 5 >= 108)
      throw config_error("unix:PATH wants a path of 1-107 bytes");
    return;
  }
  try {
    parse_listen(spec);
  } catch (const std::invalid_argument& e) {
    throw config_error(without_flag(e.what(), "--listen"));
  }
}

const std::vector<setting>& settings() {
  using c_t = server_config;
  static const std::vector<setting> table{
      {"listen", kind::value, "ADDR:PORT", "ADDR:PORT to listen on (port 0: any free one)", "", "",
       false, false,
       [](c_t& c, const std::string& v, const origin&) {
         try {
           parse_listen(v);
         } catch (const std::invalid_argument& e) {
           throw config_error(without_flag(e.what(), "--listen"));
         }
         c.options.listen = v;
       },
       [](const c_t& c) { return one(c.options.listen); }},
      {"store", kind::value, "URI",
       "store URI: redis://..., redis-cluster://..., postgres://..., sqlite:FILE or memory:",
       "DELAYQ_STORE", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         check_store(v);
         c.options.store = v;
       },
       [](const c_t& c) {
         return one(
             shown_store(c.options.store.empty() ? "redis://127.0.0.1:6379/0" : c.options.store));
       }},
      {"token", kind::value, "TOKEN",
       "bearer token every /v1/ request must carry (a flag shows in the process list: prefer "
       "--token-file)",
       "DELAYQ_TOKEN", "token", true, false,
       [](c_t& c, const std::string& v, const origin&) { c.options.token = v; },
       [](const c_t& c) {
         return c.options.token.empty() ? std::vector<std::string>{} : one(c.options.token);
       }},
      {"token_file", kind::value, "FILE",
       "read the token from FILE (one line; only its owner, root or the server's user, may "
       "change it, and no other user may read it)",
       "", "token", false, false,
       [](c_t& c, const std::string& v, const origin& at) {
         c.options.token = read_secret_file(relative_to(at, v));
       },
       [](const c_t&) { return std::vector<std::string>{}; }},
      {"tick", kind::value, "MS", "wheel resolution in milliseconds", "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.tick = milliseconds{whole(v, 1, 60'000)};
       },
       [](const c_t& c) { return number(static_cast<std::uint64_t>(c.options.tick.count())); }},
      {"workers", kind::value, "N", "engine worker threads", "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.workers = static_cast<std::size_t>(whole(v, 1, 256));
       },
       [](const c_t& c) { return number(c.options.workers); }},
      {"io_threads", kind::value, "N|auto",
       "threads serving HTTP and beanstalk connections (auto: 1 on memory:, else 2)", "", "", false,
       false,
       [](c_t& c, const std::string& v, const origin&) {
         if (v == "auto") {
           c.options.io_threads = 0;  // io_threads_for() decides
           return;
         }
         try {
           c.options.io_threads = static_cast<std::size_t>(whole(v, 1, 256));
         } catch (const config_error&) {
           throw config_error("wants auto or a whole number from 1 to 256, got \"" + v + "\"");
         }
       },
       [](const c_t& c) {
         return c.options.io_threads == 0 ? std::vector<std::string>{"auto"}
                                          : number(c.options.io_threads);
       }},
      {"push", kind::list, "TYPE=URL", "a push target (repeatable; kept in the store)", "", "",
       false, false,
       [](c_t& c, const std::string& v, const origin&) {
         const std::size_t eq = v.find('=');
         if (eq == std::string::npos || eq == 0)
           throw config_error("wants TYPE=URL, got \"" + v + "\"");
         std::string why;
         if (!parse_http_url(v.substr(eq + 1), why)) throw config_error(why);
         c.options.push.push_back(v);
       },
       [](const c_t& c) { return c.options.push; }},
      {"capacity", kind::list, "TYPE=N",
       "at most N pending tasks of TYPE; more get 429 type_full (repeatable)", "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         try {
           const std::string type = parse_capacity(v).first;
           for (const std::string& s : c.options.capacity)
             if (parse_capacity(s).first == type)
               throw config_error("names type \"" + type + "\" twice");
         } catch (const std::invalid_argument& e) {
           throw config_error(without_flag(e.what(), "--capacity"));
         }
         c.options.capacity.push_back(v);
       },
       [](const c_t& c) { return c.options.capacity; }},
      {"max_connections", kind::value, "N",
       "connections open at once; one more is closed at once, and counted in /metrics "
       "(delayq_http_connections_refused_total)",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.max_connections = static_cast<std::size_t>(whole(v, 1, 1'000'000));
       },
       [](const c_t& c) { return number(c.options.max_connections); }},
      {"allowed_host", kind::list, "NAME",
       "without a token: a host name the Host header may name besides the listen address and "
       "localhost (repeatable; anything else gets 403, against DNS rebinding)",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) { c.options.allowed_hosts.push_back(v); },
       [](const c_t& c) { return c.options.allowed_hosts; }},
      {"push_allow", kind::list, "RULE",
       "CIDR|HOST[:PORT] push targets may reach (repeatable; default: loopback only). "
       "Link-local (cloud metadata), 0.0.0.0 and this server are refused unless named alone",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         try {
           push_policy({v}, {});
         } catch (const std::invalid_argument& e) {
           throw config_error(without_flag(e.what(), "--push-allow"));
         }
         c.options.push_allow.push_back(v);
       },
       [](const c_t& c) { return c.options.push_allow; }},
      {"drain_timeout", kind::value, "D",
       "on SIGTERM or SIGINT, the most the drain waits for requests and pushes in flight, 0s "
       "to 1h; a push still unanswered then is pushed again after the restart",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         c.drain_timeout = duration_within(v, milliseconds{0}, std::chrono::hours{1}, "0s to 1h");
       },
       [](const c_t& c) { return one(show_duration(c.drain_timeout)); }},
      {"log_level", kind::value, "LEVEL",
       "the least severe log lines written to stderr: debug, info, warning or error (info adds "
       "the store's and the engine's notes: recovery, a PostgreSQL generation rotated, shards "
       "taken or lost)",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         const auto* at = std::find(std::begin(log_level_names), std::end(log_level_names), v);
         if (at == std::end(log_level_names))
           throw config_error("wants debug, info, warning or error, got \"" + v + "\"");
         c.log_threshold = static_cast<log_level>(at - std::begin(log_level_names));
       },
       [](const c_t& c) {
         return one(std::string(log_level_names[static_cast<int>(c.log_threshold)]));
       }},
      {"beanstalk_listen", kind::list, "ADDR:PORT|unix:PATH",
       "speak beanstalkd's protocol there (repeatable; beanstalkd's port is 11300; "
       "docs/beanstalk.md)",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         check_listen_spec(v);
         c.options.beanstalk_listen.push_back(v);
       },
       [](const c_t& c) { return c.options.beanstalk_listen; }},
      {"beanstalk_allow", kind::list, "CIDR",
       "CIDR block of TCP peers allowed on the beanstalk addresses besides loopback "
       "(repeatable)",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         std::string why;
         if (!ip_block::parse(v, why)) throw config_error(why);
         c.options.beanstalk_allow.push_back(v);
       },
       [](const c_t& c) { return c.options.beanstalk_allow; }},
      {"max_job_size", kind::value, "BYTES",
       "largest beanstalk job body in bytes (JOB_TOO_BIG beyond)", "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.max_job_size = static_cast<std::size_t>(whole(v, 1, std::int64_t{1} << 30));
       },
       [](const c_t& c) { return number(c.options.max_job_size); }},
      {"beanstalk_command_timeout", kind::value, "D",
       "the most a beanstalk client may take to send one command, from its first byte to its "
       "last (line and body), 100ms to 1h; past it the connection is closed",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.beanstalk_command_timeout =
             duration_within(v, milliseconds{100}, std::chrono::hours{1}, "100ms to 1h");
       },
       [](const c_t& c) { return one(show_duration(c.options.beanstalk_command_timeout)); }},
      {"beanstalk_idle_timeout", kind::value, "D",
       "close a beanstalk connection that holds no reservation, waits in no reserve and has no "
       "command under way once it stayed so this long, 0s (never) to 24h",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.beanstalk_idle_timeout =
             duration_within(v, milliseconds{0}, std::chrono::hours{24}, "0s to 24h");
       },
       [](const c_t& c) { return one(show_duration(c.options.beanstalk_idle_timeout)); }},
      {"max_body", kind::value, "BYTES", "largest request body in bytes (413 beyond)", "", "",
       false, false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.max_body = static_cast<std::size_t>(whole(v, 1024, std::int64_t{1} << 30));
       },
       [](const c_t& c) { return number(c.options.max_body); }},
      {"retry_max", kind::value, "N", "attempts before a task becomes a dead letter", "", "", false,
       false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.retry.max_attempts = static_cast<std::uint32_t>(whole(v, 1, 1'000'000));
       },
       [](const c_t& c) { return number(c.options.retry.max_attempts); }},
      {"retry_base", kind::value, "MS", "first retry backoff bound in milliseconds", "", "", false,
       false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.retry.base = milliseconds{whole(v, 0, 86'400'000)};
       },
       [](const c_t& c) {
         return number(static_cast<std::uint64_t>(c.options.retry.base.count()));
       }},
      {"retry_cap", kind::value, "MS", "largest retry backoff bound in milliseconds", "", "", false,
       false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.retry.cap = milliseconds{whole(v, 0, 86'400'000)};
       },
       [](const c_t& c) {
         return number(static_cast<std::uint64_t>(c.options.retry.cap.count()));
       }},
      {"horizon", kind::value, "S",
       "seconds ahead the engine holds tasks in memory; later ones stay in the store (0: hold "
       "every task)",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.horizon = std::chrono::seconds{whole(v, 0, std::int64_t{366} * 86'400)};
       },
       [](const c_t& c) {
         return number(static_cast<std::uint64_t>(c.options.horizon.count() / 1000));
       }},
      {"cluster", kind::toggle, "",
       "run as one instance of a cluster on a store the instances share (Redis or PostgreSQL): "
       "hold and run only the shards this "
       "instance holds a lease on (docs/scale-out.md)",
       "", "", false, false,
       [](c_t& c, const std::string& v, const origin&) {
         if (v != "true" && v != "false")
           throw config_error("wants true or false, got \"" + v + "\"");
         c.options.cluster = v == "true";
       },
       [](const c_t& c) { return one(c.options.cluster ? "true" : "false"); }},
      {"shards", kind::value, "N",
       "with cluster: how many shards tasks are split into; every instance must use the same "
       "number (a shards=N in the store URI may give it instead)",
       "", "", false, true,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.shards = static_cast<std::uint32_t>(whole(v, 1, 16384));
         c.options.shards_given = true;
       },
       [](const c_t& c) { return number(c.options.shards); }},
      {"lease", kind::value, "D",
       "with cluster: how long a shard lease lives without renewal (200ms to 10m)", "", "", false,
       true,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.lease =
             duration_within(v, milliseconds{200}, std::chrono::minutes{10}, "200ms to 10m");
       },
       [](const c_t& c) { return one(show_duration(c.options.lease)); }},
      {"instance", kind::value, "NAME",
       "with cluster: this instance's name, unique among live instances (default "
       "HOSTNAME:PID)",
       "", "", false, true,
       [](c_t& c, const std::string& v, const origin&) { c.options.instance = v; },
       [](const c_t& c) {
         return c.options.instance.empty() ? std::vector<std::string>{} : one(c.options.instance);
       }},
      {"forward_timeout", kind::value, "D",
       "with cluster: the most a call forwarded to the instance that owns its task may take "
       "before it is answered 503 outcome_unknown, 100ms to 10m",
       "", "", false, true,
       [](c_t& c, const std::string& v, const origin&) {
         c.options.forward_timeout =
             duration_within(v, milliseconds{100}, std::chrono::minutes{10}, "100ms to 10m");
       },
       [](const c_t& c) { return one(show_duration(c.options.forward_timeout)); }},
      {"cluster_secret", kind::value, "SECRET",
       "with cluster: the key (16 bytes or more, the same on every instance) that authenticates "
       "a forwarded call's X-Delayq-Forwarded-By (default: the token; without one, a random "
       "key kept in the store)",
       "DELAYQ_CLUSTER_SECRET", "cluster_secret", true, false,
       [](c_t& c, const std::string& v, const origin&) { c.options.cluster_secret = v; },
       [](const c_t& c) {
         return c.options.cluster_secret.empty() ? std::vector<std::string>{}
                                                 : one(c.options.cluster_secret);
       }},
      {"cluster_secret_file", kind::value, "FILE",
       "read the cluster secret from FILE (the same rules as token_file)", "", "cluster_secret",
       false, false,
       [](c_t& c, const std::string& v, const origin& at) {
         c.options.cluster_secret = read_secret_file(relative_to(at, v));
       },
       [](const c_t&) { return std::vector<std::string>{}; }},
      {"advertise", kind::value, "URL",
       "with cluster: the http:// URL the other instances reach this one's API at (default: "
       "the address it listens on; the host name when that is 0.0.0.0 or ::)",
       "", "", false, true,
       [](c_t& c, const std::string& v, const origin&) {
         std::string why;
         if (!parse_http_url(v, why)) throw config_error(why);
         c.options.advertise = v;
       },
       [](const c_t& c) {
         return c.options.advertise.empty() ? std::vector<std::string>{} : one(c.options.advertise);
       }},
  };
  return table;
}

std::string flag_of(std::string_view key) {
  std::string f = "--" + std::string(key);
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

const setting* find_setting(std::string_view key) {
  for (const setting& s : settings())
    if (s.key == key) return &s;
  return nullptr;
}

std::string_view group_of(const setting& s) { return s.group.empty() ? s.key : s.group; }

// ------------------------------------------------------------------ the file

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return std::string(s.substr(first, last - first + 1));
}

std::string read_config_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw config_error(path + ": cannot read the config file: " + std::strerror(errno));
  struct stat st {};
  std::string why, text;
  if (::fstat(fd, &st) != 0)
    why = std::string("cannot stat it: ") + std::strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = "is not a regular file";
  else if (st.st_size > (1 << 20))
    why = "is over 1 MiB: not a config file";
  if (why.empty()) {
    char buf[8192];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
    if (n < 0) why = std::string("cannot read it: ") + std::strerror(errno);
  }
  ::close(fd);
  if (!why.empty()) throw config_error(path + ": the config file " + why);
  return text;
}

// One place's values of one setting.
struct given {
  const setting* s = nullptr;
  std::vector<std::string> values;
  std::vector<origin> where;  // one per value
};

void print_config(const server_config& c, const std::map<std::string_view, given>& winners,
                  std::ostream& os) {
  os << "# delayq-server " << DELAYQ_VERSION
     << ": the settings in effect (flag > environment > config file > default)\n";
  if (!c.config_path.empty()) os << "# config file: " << c.config_path << "\n";
  for (const setting& s : settings()) {
    // A setting whose value is another's (token_file gives the token) is
    // shown with it.
    if (!s.group.empty() && s.group != s.key) continue;
    const auto w = winners.find(group_of(s));
    std::string from = "default";
    if (w != winners.end()) {
      const given& g = w->second;
      from = g.where.front().name;
      if (g.s != &s) from = std::string(g.s->key) + " " + g.values.front() + ", " + from;
    }
    const std::vector<std::string> values = s.show(c);
    if (values.empty()) {
      os << "# " << s.key << ": not set\n";
      continue;
    }
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::string v = s.secret ? "(masked)" : values[i];
      std::string line = std::string(s.key) + " = " + v;
      std::string note = from;
      if (w != winners.end() && i < w->second.where.size() && w->second.s == &s)
        note = w->second.where[i].name;
      if (line.size() < 40) line.resize(40, ' ');
      os << line << "  # " << note << "\n";
    }
  }
}

}  // namespace

std::vector<config_line> parse_config_text(std::string_view text, const std::string& file) {
  std::vector<config_line> out;
  int number = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    std::string_view raw = text.substr(at, end - at);
    at = end + 1;
    ++number;
    if (raw.ends_with('\r')) raw.remove_suffix(1);
    const std::string line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const auto where = file + ":" + std::to_string(number) + ": ";
    if (line.find('\0') != std::string::npos) throw config_error(where + "holds a NUL byte");
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos)
      throw config_error(where + "not a \"key = value\" line: \"" + line + "\"");
    config_line l;
    l.key = trim(std::string_view(line).substr(0, eq));
    l.line = number;
    if (l.key.empty() ||
        l.key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
      throw config_error(where + "not a \"key = value\" line: \"" + line + "\"");
    std::string rest = trim(std::string_view(line).substr(eq + 1));
    if (!rest.empty() && rest.front() == '"') {
      // "..." keeps what is inside as it is (spaces, '#'); nothing but a
      // comment may follow.
      const std::size_t close = rest.find('"', 1);
      if (close == std::string::npos)
        throw config_error(where + l.key + ": the value's \" is not closed");
      const std::string after = trim(std::string_view(rest).substr(close + 1));
      if (!after.empty() && after.front() != '#')
        throw config_error(where + l.key + ": text after the quoted value: \"" + after + "\"");
      l.value = rest.substr(1, close - 1);
    } else {
      // A '#' first, or after a space or tab, starts a comment.
      for (std::size_t i = 0; i < rest.size(); ++i)
        if (rest[i] == '#' && (i == 0 || rest[i - 1] == ' ' || rest[i - 1] == '\t')) {
          rest = trim(std::string_view(rest).substr(0, i));
          break;
        }
      l.value = rest;
    }
    if (l.value.empty()) throw config_error(where + l.key + ": has no value");
    out.push_back(std::move(l));
  }
  return out;
}

std::optional<int> load_server_config(int argc, const char* const* argv, server_config& out,
                                      std::ostream& out_stream, std::ostream& err_stream) {
  const server_config preset;
  CLI::App app{"delayq-server: delayed tasks over HTTP (docs/server.md)", "delayq-server"};
  app.set_version_flag("--version", std::string("delayq-server ") + DELAYQ_VERSION);
  app.add_option("--config", out.config_path,
                 "read settings from FILE, `key = value` lines whose keys are these flags' "
                 "names with _ for - (drain_timeout = 30s); a flag, then an environment "
                 "variable, overrides the file (the package's: /etc/delayq/delayq.conf)")
      ->type_name("FILE");
  app.add_flag("--print-config", out.print_config,
               "print the settings in effect, where each came from, secrets masked, and exit");
  app.add_flag("--list-routes", out.list_routes,
               "print every route of the API (METHOD PATH, one a line) and exit");

  // One CLI11 option per setting, holding the text as given: the table's
  // check applies to flags and file alike, after the precedence is settled.
  std::map<std::string_view, std::string> flag_value;
  std::map<std::string_view, std::vector<std::string>> flag_list;
  std::map<std::string_view, bool> flag_on;
  std::map<std::string_view, CLI::Option*> flag_option;
  for (const setting& s : settings()) {
    std::string help(s.help);
    if (!s.env.empty()) help += " (environment: " + std::string(s.env) + ")";
    if (s.k == kind::toggle) {
      flag_option[s.key] = app.add_flag(flag_of(s.key), flag_on[s.key], help);
      continue;
    }
    CLI::Option* o = s.k == kind::list ? app.add_option(flag_of(s.key), flag_list[s.key], help)
                                       : app.add_option(flag_of(s.key), flag_value[s.key], help);
    o->type_name(std::string(s.type));
    if (const auto shown = s.show(preset); !shown.empty() && !s.secret && s.k == kind::value)
      o->default_str(shown.front());
    flag_option[s.key] = o;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end here with 0; any other usage error is 2, as
    // for a bad file (CLI11's own codes are 100 and up).
    const int code = app.exit(e, out_stream, err_stream);
    return code == 0 ? 0 : 2;
  }

  try {
    // What each place gives, by group (token and token_file are one).
    std::map<std::string_view, given> from_flags, from_env, from_file;
    for (const setting& s : settings()) {
      CLI::Option* o = flag_option[s.key];
      if (o->count() == 0) continue;
      given g{&s, {}, {}};
      if (s.k == kind::toggle)
        g.values = {"true"};
      else if (s.k == kind::list)
        g.values = flag_list[s.key];
      else
        g.values = {flag_value[s.key]};
      g.where.assign(g.values.size(), origin{source::flag, flag_of(s.key), {}});
      auto [it, fresh] = from_flags.emplace(group_of(s), std::move(g));
      if (!fresh)
        throw config_error(std::string(flag_of(it->second.s->key)) + " and " + flag_of(s.key) +
                           " give the same setting: give one");
    }
    for (const setting& s : settings()) {
      if (s.env.empty()) continue;
      const char* v = std::getenv(std::string(s.env).c_str());  // NOLINT(concurrency-mt-unsafe)
      if (v == nullptr || *v == '\0') continue;                 // as CLI11 did: empty means unset
      from_env.emplace(group_of(s),
                       given{&s, {v}, {origin{source::environment, std::string(s.env), {}}}});
    }
    if (!out.config_path.empty()) {
      const std::string& path = out.config_path;
      const std::vector<config_line> lines = parse_config_text(read_config_file(path), path);
      const std::size_t slash = path.rfind('/');
      const std::string dir = slash == std::string::npos ? std::string{} : path.substr(0, slash);
      bool holds_secret = false;
      int secret_line = 0;
      std::string secret_key;
      for (const config_line& l : lines) {
        const std::string where = path + ":" + std::to_string(l.line);
        const setting* s = find_setting(l.key);
        if (s == nullptr) {
          std::string hint;
          std::string underscored = l.key;
          std::replace(underscored.begin(), underscored.end(), '-', '_');
          if (find_setting(underscored) != nullptr)
            hint = " (did you mean " + underscored + "?)";
          else
            hint =
                " (the keys are delayq-server's flags without -- and with _ for -: "
                "delayq-server --help lists them)";
          throw config_error(where + ": unknown key \"" + l.key + "\"" + hint);
        }
        if (s->secret && !holds_secret) {
          holds_secret = true;
          secret_line = l.line;
          secret_key = l.key;
        }
        auto [it, fresh] = from_file.emplace(group_of(*s), given{s, {}, {}});
        given& g = it->second;
        if (!fresh && g.s != s)
          throw config_error(where + ": " + l.key + ": " + std::string(g.s->key) + " is set at " +
                             g.where.front().name + " already: give one of them");
        if (!fresh && s->k != kind::list)
          throw config_error(where + ": " + l.key + ": set twice (first at " +
                             g.where.front().name + ")");
        g.values.push_back(l.value);
        g.where.push_back(origin{source::file, where, dir});
      }
      // A file holding a secret is held to the rule of a secret file.
      if (holds_secret) {
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0)
          if (std::string why = unsafe_secret_file(st); !why.empty())
            throw config_error(path + ":" + std::to_string(secret_line) + ": " + secret_key +
                               ": this file holds a secret, but it " + why +
                               "; or move the "
                               "secret to " +
                               secret_key + "_file");
      }
    }

    // Each setting from the most specific place that gives it.
    std::map<std::string_view, given> winners;
    for (const auto* level : {&from_flags, &from_env, &from_file})
      for (const auto& [group, g] : *level) winners.emplace(group, g);
    for (const auto& [group, g] : winners) {
      for (std::size_t i = 0; i < g.values.size(); ++i) {
        try {
          g.s->apply(out, g.values[i], g.where[i]);
        } catch (const config_error& e) {
          const origin& at = g.where[i];
          const std::string where =
              at.from == source::file ? at.name + ": " + std::string(g.s->key) : at.name;
          throw config_error(where + ": " + e.what());
        }
      }
    }
    // Settings only a cluster instance reads, given without cluster.
    if (!out.options.cluster)
      for (const auto& [group, g] : winners)
        if (g.s->needs_cluster) {
          const origin& at = g.where.front();
          throw config_error(at.from == source::file ? at.name + ": " + std::string(g.s->key) +
                                                           " needs cluster = true (or --cluster)"
                                                     : at.name + " needs --cluster");
        }
    if (out.print_config) {
      print_config(out, winners, out_stream);
      return 0;
    }
  } catch (const config_error& e) {
    err_stream << "delayq-server: " << e.what() << "\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace delayq::server
