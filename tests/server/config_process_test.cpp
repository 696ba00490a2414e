// delayq-server's settings from a config file (--config), the environment
// and flags (docs/server.md, "Config file"): what wins, that the file's
// values take effect in a real server, and every refusal: exit 2, naming
// the file, the line and the key (or the flag, or the variable).
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "server_test_support.hpp"

namespace {

// A config file (or any file) in `dir` with `text` and mode `mode`.
std::string cfg_write(const temp_dir& dir, const std::string& name, const std::string& text,
                      mode_t mode = 0600) {
  const std::string path = dir.path() + "/" + name;
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
  }
  ::chmod(path.c_str(), mode);
  return path;
}

// Runs delayq-server with `args` to its end; its exit status and stderr.
struct cfg_run {
  int status = 0;
  std::string out, err;
};
cfg_run cfg_exit(std::vector<std::string> args, std::vector<std::string> env = {}) {
  server_process p(std::move(args), server_binary(), std::move(env));
  cfg_run r;
  r.status = p.wait();
  r.err = p.stderr_after_exit();
  r.out = p.output();
  return r;
}

// --print-config's line for `key` ("store = memory:  # DELAYQ_STORE").
std::string cfg_line(const std::string& printed, const std::string& key) {
  std::size_t at = 0;
  while (at < printed.size()) {
    const std::size_t end = std::min(printed.find('\n', at), printed.size());
    const std::string line = printed.substr(at, end - at);
    if (line.starts_with(key + " = ")) return line;
    at = end + 1;
  }
  return {};
}

}  // namespace

TEST_CASE("config: a file configures a real server, and --print-config masks its secrets") {
  temp_dir dir;
  const std::string token = "file-token-" + unique_name("t");
  const std::string secret = "cluster-secret-0123456789abcdef";
  const std::string token_file = cfg_write(dir, "token", token + "\n", 0600);
  const std::string secret_file = cfg_write(dir, "secret", secret + "\n", 0640);
  const std::string conf = cfg_write(dir, "delayq.conf",
                                     "# a comment, then a blank line\n"
                                     "\n"
                                     "listen = 127.0.0.1:0\n"
                                     "store = \"sqlite:" +
                                         dir.path() +
                                         "/tasks.db\"  # quoted\n"
                                         "token_file = token   # relative: beside this file\n"
                                         "tick = 10\n"
                                         "drain_timeout = 2s\n"
                                         "capacity = capped=1\n"
                                         "push_allow = 127.0.0.1\n"
                                         "push_allow = ::1\n"
                                         "cluster_secret_file = " +
                                         secret_file + "\n",
                                     0644);
  SUBCASE("--print-config says what is in effect and where it came from") {
    const cfg_run r = cfg_exit({"--config", conf, "--print-config"});
    INFO(r.out);
    CHECK_MESSAGE((WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0), describe_status(r.status));
    CHECK(cfg_line(r.out, "listen").find("127.0.0.1:0") != std::string::npos);
    CHECK(cfg_line(r.out, "listen").find(conf + ":3") != std::string::npos);
    CHECK(cfg_line(r.out, "store").find("sqlite:" + dir.path() + "/tasks.db") != std::string::npos);
    CHECK(cfg_line(r.out, "tick").find("= 10 ") != std::string::npos);
    CHECK(cfg_line(r.out, "drain_timeout").find("= 2s ") != std::string::npos);
    CHECK(cfg_line(r.out, "workers").find("# default") != std::string::npos);
    CHECK(cfg_line(r.out, "io_threads").starts_with("io_threads = auto "));
    CHECK(cfg_line(r.out, "io_threads").ends_with("# default"));
    CHECK(cfg_line(r.out, "token").find("(masked)") != std::string::npos);
    CHECK(cfg_line(r.out, "token").find("token_file token, " + conf + ":5") != std::string::npos);
    CHECK(r.out.find("push_allow = ::1") != std::string::npos);
    // Neither secret shows.
    CHECK(r.out.find(token) == std::string::npos);
    CHECK(r.out.find(secret) == std::string::npos);
  }
  SUBCASE("a store URI's password is masked too") {
    const cfg_run r = cfg_exit({"--config", conf, "--print-config", "--store",
                                "redis://:hunter2-password@127.0.0.1:6379/0"});
    INFO(r.out);
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(cfg_line(r.out, "store").find("127.0.0.1:6379") != std::string::npos);
    CHECK(r.out.find("hunter2") == std::string::npos);
  }
  SUBCASE("a PostgreSQL store URI's password is masked too") {
    const cfg_run r = cfg_exit({"--config", conf, "--print-config", "--store",
                                "postgres://delayq:hunter2-password@127.0.0.1:5432/app"});
    INFO(r.out);
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(cfg_line(r.out, "store").find("postgres://delayq@127.0.0.1:5432/app") !=
          std::string::npos);
    CHECK(r.out.find("hunter2") == std::string::npos);
  }
  SUBCASE("the server runs with the file's settings: its token, its store, its capacity") {
    server_process server({"--config", conf});
    const std::uint16_t port = server.wait_listening();
    INFO(server.output_tail());
    http_client without(port, "");
    CHECK(add_task(without, "t", "x", 1000).status == 401);
    http_client with(port, token);
    auto r = add_task(with, "capped", "x", 3'600'000);
    CHECK_MESSAGE(r.status == 201, r.describe());
    r = add_task(with, "capped", "y", 3'600'000);
    CHECK_MESSAGE(r.status == 429, r.describe());
    // The file's store: the SQLite file exists now.
    struct stat st {};
    CHECK(::stat((dir.path() + "/tasks.db").c_str(), &st) == 0);
  }
}

TEST_CASE("config: a flag beats the environment, which beats the file") {
  temp_dir dir;
  const std::string file_token = "token-from-the-file-1";
  const std::string env_token = "token-from-the-env-22";
  const std::string flag_token = "token-from-a-flag-333";
  cfg_write(dir, "token", file_token + "\n");
  const std::string conf = cfg_write(dir, "delayq.conf",
                                     "listen = 127.0.0.1:0\n"
                                     "store = sqlite:" +
                                         dir.path() +
                                         "/file.db\n"
                                         "token_file = token\n"
                                         "tick = 10\n");
  SUBCASE("as --print-config tells it") {
    auto r = cfg_exit({"--config", conf, "--print-config"}, {"DELAYQ_STORE=memory:"});
    INFO(r.out);
    CHECK(cfg_line(r.out, "store").find("= memory: ") != std::string::npos);
    CHECK(cfg_line(r.out, "store").find("# DELAYQ_STORE") != std::string::npos);
    r = cfg_exit({"--config", conf, "--print-config", "--store", "sqlite:" + dir.path() + "/f.db"},
                 {"DELAYQ_STORE=memory:"});
    CHECK(cfg_line(r.out, "store").find("/f.db") != std::string::npos);
    CHECK(cfg_line(r.out, "store").find("# --store") != std::string::npos);
    r = cfg_exit({"--config", conf, "--print-config"});
    CHECK(cfg_line(r.out, "store").find("/file.db") != std::string::npos);
  }
  SUBCASE("the file's token, overridden by DELAYQ_TOKEN") {
    server_process server({"--config", conf}, server_binary(), {"DELAYQ_TOKEN=" + env_token});
    const std::uint16_t port = server.wait_listening();
    http_client by_file(port, file_token), by_env(port, env_token);
    CHECK(add_task(by_file, "t", "x", 1000).status == 401);
    CHECK(add_task(by_env, "t", "x", 1000).status == 201);
  }
  SUBCASE("DELAYQ_TOKEN, overridden by --token") {
    server_process server({"--config", conf, "--token", flag_token}, server_binary(),
                          {"DELAYQ_TOKEN=" + env_token});
    const std::uint16_t port = server.wait_listening();
    http_client by_env(port, env_token), by_flag(port, flag_token);
    CHECK(add_task(by_env, "t", "x", 1000).status == 401);
    CHECK(add_task(by_flag, "t", "x", 1000).status == 201);
  }
  SUBCASE("--token-file beats the environment like --token") {
    const std::string other = cfg_write(dir, "other", flag_token);
    server_process server({"--config", conf, "--token-file", other}, server_binary(),
                          {"DELAYQ_TOKEN=" + env_token});
    const std::uint16_t port = server.wait_listening();
    http_client by_env(port, env_token), by_flag(port, flag_token);
    CHECK(add_task(by_env, "t", "x", 1000).status == 401);
    CHECK(add_task(by_flag, "t", "x", 1000).status == 201);
  }
}

TEST_CASE("config: every refusal exits 2, naming the file, the line and the key") {
  temp_dir dir;
  const std::string good_token = cfg_write(dir, "token", "a-good-token-123\n");
  struct bad_file {
    const char* what;
    std::string text;
    std::string expect;  // after "FILE:"
  };
  const std::vector<bad_file> cases{
      {"an unknown key", "listen = 127.0.0.1:0\ndealy = 5\n", "2: unknown key \"dealy\""},
      {"a key spelt with dashes", "drain-timeout = 5s\n",
       "1: unknown key \"drain-timeout\" (did you mean drain_timeout?)"},
      {"a line that is not key = value", "\nlisten\n", "2: not a \"key = value\" line"},
      {"a key with no value", "tick =   # nothing\n", "1: tick: has no value"},
      {"an unclosed quote", "store = \"sqlite:x.db\n", "1: store: the value's \" is not closed"},
      {"text after a quoted value", "store = \"sqlite:x.db\" more\n",
       "1: store: text after the quoted value"},
      {"a number out of range", "\n\ntick = 0\n", "3: tick: wants a whole number from 1 to 60000"},
      {"a number that is not one", "workers = two\n", "1: workers: wants a whole number"},
      {"no I/O thread", "io_threads = 0\n",
       "1: io_threads: wants auto or a whole number from 1 to 256, got \"0\""},
      {"a duration without a unit", "drain_timeout = 5\n",
       "1: drain_timeout: wants a whole number with a unit"},
      {"a duration out of range", "drain_timeout = 2h\n",
       "1: drain_timeout: must be from 0s to 1h"},
      {"a bad listen address", "listen = nowhere\n", "1: listen: wants ADDR:PORT"},
      {"a bad store URI", "store = mysql://x\n", "1: store: \"mysql://x\" is not a store URI"},
      {"a bad push target", "push = nourl\n", "1: push: wants TYPE=URL"},
      {"a bad capacity", "capacity = email=0\n", "1: capacity: wants TYPE=N"},
      {"a capacity named twice", "capacity = a=1\ncapacity = a=2\n",
       "2: capacity: names type \"a\" twice"},
      {"a bad push rule", "push_allow = 10.0.0.0/99\n", "1: push_allow:"},
      {"a bad beanstalk address", "beanstalk_listen = here\n", "1: beanstalk_listen: wants"},
      {"a bad beanstalk peer block", "beanstalk_allow = 10.0.0.0/77\n", "1: beanstalk_allow:"},
      {"a bad boolean", "cluster = yes\n", "1: cluster: wants true or false"},
      {"a bad log level", "log_level = loud\n",
       "1: log_level: wants debug, info, warning or error, got \"loud\""},
      {"a key set twice", "tick = 5\ntick = 6\n", "2: tick: set twice (first at "},
      {"the token and a token file", "token_file = token\ntoken = abc\n",
       "2: token: token_file is set at "},
      {"a cluster setting without the cluster", "shards = 8\n", "1: shards needs cluster = true"},
      {"a token file that does not exist", "token_file = missing\n",
       "1: token_file: " + dir.path() + "/missing: cannot read it: No such file"},
  };
  for (const bad_file& c : cases) {
    INFO(c.what);
    const std::string conf = cfg_write(dir, "bad.conf", c.text);
    // No flag besides: a flag would override the file's value.
    const cfg_run r = cfg_exit({"--config", conf});
    INFO(r.err);
    CHECK_MESSAGE((WIFEXITED(r.status) && WEXITSTATUS(r.status) == 2), describe_status(r.status));
    CHECK(r.err.find("delayq-server: " + conf + ":" + c.expect) != std::string::npos);
    CHECK(r.out.find("listening on") == std::string::npos);
  }
}

TEST_CASE(
    "config: --log-level info adds the info lines, and by default only warnings and errors show") {
  // The engine notes its start at info ("started with N stored tasks"): a
  // line the default leaves out, and --log-level info (or debug) writes.
  // The engine starts before the server listens, so once the listening line
  // is out the line was written if it ever will be; SIGKILL then (a SIGTERM
  // may come before the drain's handler is installed), and all of stderr is
  // read once the pipes close.
  const auto run = [](std::vector<std::string> extra) {
    std::vector<std::string> args{"--listen", "127.0.0.1:0", "--store", "memory:"};
    args.insert(args.end(), extra.begin(), extra.end());
    server_process p(std::move(args));
    p.wait_listening();
    p.kill_now();
    return p.stderr_after_exit();
  };
  const std::string started = "delayq info: started with 0 stored tasks from ";
  for (const char* level : {"info", "debug"}) {
    INFO(level);
    const std::string err = run({"--log-level", level});
    CHECK(err.find(started) != std::string::npos);
  }
  for (const std::vector<std::string>& quiet :
       {std::vector<std::string>{}, std::vector<std::string>{"--log-level", "warning"},
        std::vector<std::string>{"--log-level", "error"}}) {
    const std::string err = run(quiet);
    INFO(err);
    CHECK(err.find("delayq info:") == std::string::npos);
  }
}

TEST_CASE("config: unreadable files and unsafe secret files stop the start with exit 2") {
  temp_dir dir;
  const auto refused = [&](std::vector<std::string> args, const std::string& expect) {
    args.insert(args.end(), {"--listen", "127.0.0.1:0", "--store", "memory:"});
    const cfg_run r = cfg_exit(std::move(args));
    INFO(r.err);
    CHECK_MESSAGE((WIFEXITED(r.status) && WEXITSTATUS(r.status) == 2), describe_status(r.status));
    CHECK(r.err.find(expect) != std::string::npos);
    CHECK(r.out.find("listening on") == std::string::npos);
  };
  SUBCASE("a config file that is not there, or a folder") {
    refused({"--config", dir.path() + "/nope.conf"},
            dir.path() + "/nope.conf: cannot read the config file: No such file or directory");
    refused({"--config", dir.path()}, dir.path() + ": the config file is not a regular file");
  }
  SUBCASE("a token file others can read, or change, or owned by someone else") {
    const std::string readable = cfg_write(dir, "readable", "tok-123\n", 0644);
    refused({"--token-file", readable}, "--token-file: " + readable + " has mode 0644");
    const std::string group_writable = cfg_write(dir, "gw", "tok-123\n", 0660);
    refused({"--token-file", group_writable}, "has mode 0660");
    const std::string foreign = cfg_write(dir, "foreign", "tok-123\n", 0600);
    if (::geteuid() == 0) {
      REQUIRE(::chown(foreign.c_str(), 4242, 4242) == 0);
      refused({"--token-file", foreign}, "belongs to user id 4242");
    }
  }
  SUBCASE("a token file that is empty, or holds what a header cannot carry") {
    refused({"--token-file", cfg_write(dir, "empty", "\n")}, "is empty");
    refused({"--token-file", cfg_write(dir, "spaced", "two words\n")},
            "holds a byte a bearer token cannot carry");
    refused({"--cluster-secret-file", cfg_write(dir, "lines", "a\nb\n")},
            "--cluster-secret-file: ");
  }
  SUBCASE("a config file holding a secret that others can read") {
    const std::string conf = cfg_write(dir, "open.conf", "tick = 5\ntoken = s3cret-token\n", 0644);
    refused({"--config", conf}, conf + ":2: token: this file holds a secret, but it has mode 0644");
    // The same file, private: accepted.
    ::chmod(conf.c_str(), 0600);
    const cfg_run r = cfg_exit({"--config", conf, "--print-config"});
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(r.out.find("s3cret-token") == std::string::npos);
  }
  SUBCASE("the token twice on the command line, a bad flag, a bad variable") {
    refused({"--token", "a", "--token-file", cfg_write(dir, "t", "b\n")},
            "--token and --token-file give the same setting: give one");
    refused({"--tick", "0"}, "--tick: wants a whole number from 1 to 60000");
    refused({"--no-such-flag"}, "--no-such-flag");
    const cfg_run r = cfg_exit({"--listen", "127.0.0.1:0"}, {"DELAYQ_STORE=mysql://db"});
    CHECK(WEXITSTATUS(r.status) == 2);
    CHECK(r.err.find("DELAYQ_STORE: \"mysql://db\" is not a store URI") != std::string::npos);
  }
}
