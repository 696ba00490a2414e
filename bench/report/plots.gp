# plots.gp - PNG plots of the micro benchmark medians, drawn by scripts/bench.sh:
#   gnuplot -e "dir='bench/results'" bench/report/plots.gp
# Reads <dir>/plot-data/<op>.<structure>.dat ("N ns" per line) and writes
# <dir>/micro-<op>.png (one line per structure) and <dir>/micro-wheel.png
# (the wheel's four operations together).
if (!exists("dir")) dir = "bench/results"
set terminal pngcairo size 900,600 font ",11"
set logscale xy
set format x "10^{%L}"
set xlabel "pending tasks N"
set grid xtics ytics mytics
set key top left
set pointsize 1.2
set xrange [500:2e7]
set termoption noenhanced  # names like timer_wheel are not subscripts
structures = "wheel zset heap asio"
ops = "schedule cancel reschedule fire"
do for [op in ops] {
  set output sprintf("%s/micro-%s.png", dir, op)
  set ylabel (op eq "fire" ? "ns per task fired (median)" : "ns per op (median)")
  set title sprintf("%s: ns per op against pending tasks (log-log)", op)
  plot for [s in structures] sprintf("%s/plot-data/%s.%s.dat", dir, op, s) \
       using 1:2 with linespoints title s
}
set output sprintf("%s/micro-wheel.png", dir)
set ylabel "ns per op (median)"
set title "delayq::timer_wheel: ns per op against pending tasks (log-log)"
plot for [op in ops] sprintf("%s/plot-data/%s.wheel.dat", dir, op) \
     using 1:2 with linespoints title op
