// delayq/delayq.hpp - the umbrella header: the engine and every store.
// Target delayq::delayq (links delayq::engine and delayq::persistence).
#pragma once

#include "delayq/detail/boost_cxx20.hpp"  // first: Boost 1.74 + C++20

#include "delayq/dead_letter_store.hpp"
#include "delayq/direct_completion.hpp"
#include "delayq/engine.hpp"
#include "delayq/engine_options.hpp"
#include "delayq/engine_stats.hpp"
#include "delayq/error.hpp"
#include "delayq/executor.hpp"
#include "delayq/log.hpp"
#include "delayq/memory_store.hpp"
#include "delayq/open_store.hpp"
#include "delayq/postgres_store.hpp"
#include "delayq/prometheus.hpp"
#include "delayq/record_codec.hpp"
#include "delayq/redis_store.hpp"
#include "delayq/role_store.hpp"
#include "delayq/schedule_options.hpp"
#include "delayq/sequence_store.hpp"
#include "delayq/settings_store.hpp"
#include "delayq/shard_store.hpp"
#include "delayq/sqlite_store.hpp"
#include "delayq/task.hpp"
#include "delayq/task_listener.hpp"
#include "delayq/task_status.hpp"
#include "delayq/task_store.hpp"
#include "delayq/timer_wheel.hpp"
