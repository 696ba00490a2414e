// delayq_cron_oracle: what delayq says a cron expression's next occurrences
// are, for croniter_compare.py. One case a line on standard input,
//   EXPR <TAB> TIMEZONE <TAB> AFTER_MS <TAB> N
// and one answer a line on standard output, in the same order:
//   ok MS,MS,...            the first N occurrences after AFTER_MS (fewer
//                           when the schedule ends)
//   err FIELD: REASON       check_schedule() refused it
// Uses the public API only (delayq/schedule.hpp).
#include <delayq/schedule.hpp>
#include <delayq/task.hpp>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

int main() {
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string part;
    while (std::getline(ss, part, '\t')) f.push_back(part);
    if (f.size() != 4) {
      std::cout << "err input: expected 4 tab-separated fields\n";
      continue;
    }
    delayq::schedule s;
    s.id = "oracle";
    s.type = "oracle";
    s.cron = f[0];
    s.timezone = f[1] == "UTC" ? "" : f[1];
    if (auto p = delayq::check_schedule(s)) {
      std::cout << "err " << p->field << ": " << p->reason << '\n';
      continue;
    }
    boost::system::error_code ec;
    const auto v = delayq::schedule_occurrences(s, delayq::from_epoch_ms(std::stoll(f[2])),
                                                std::stoul(f[3]), ec);
    std::cout << "ok ";
    for (std::size_t i = 0; i < v.size(); ++i)
      std::cout << (i ? "," : "") << delayq::to_epoch_ms(v[i]);
    std::cout << '\n';
  }
}
