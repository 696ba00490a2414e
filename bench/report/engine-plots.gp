# engine-plots.gp - the engine API against Asio timers, drawn by scripts/bench.sh:
#   gnuplot -e "dir='bench/results'" bench/report/engine-plots.gp
# Reads <dir>/plot-data/engine.<op>.<side>.dat ("pending ns" per line, the
# medians of delayq-bench-engine's engine.tsv) and writes
# <dir>/engine-ns-per-op.png: ns per op against pending tasks, log-log, the
# engine solid and one Asio steady_timer per task dashed, a colour per op.
if (!exists("dir")) dir = "bench/results"
set terminal pngcairo size 900,600 font ",11" dashed
set logscale xy
set format x "1e%L"
set xlabel "pending tasks"
set ylabel "ns per op (median of the rounds)"
set title "engine API (solid) against one Asio steady_timer per task (dashed), one user thread"
set grid xtics ytics mytics
set key outside right top
set pointsize 1.2
set xrange [500:2e7]
set termoption noenhanced
ops = "schedule cancel reschedule"
set output sprintf("%s/engine-ns-per-op.png", dir)
plot for [i = 1:words(ops)] sprintf("%s/plot-data/engine.%s.engine.dat", dir, word(ops, i)) \
       using 1:2 with linespoints lc i dt 1 pt 7 title sprintf("engine %s", word(ops, i)), \
     for [i = 1:words(ops)] sprintf("%s/plot-data/engine.%s.asio.dat", dir, word(ops, i)) \
       using 1:2 with linespoints lc i dt 2 pt 6 title sprintf("asio %s", word(ops, i))
