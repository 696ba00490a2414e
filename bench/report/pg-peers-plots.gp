# pg-peers-plots.gp - the plot of issue 34's side-by-side benchmark
# (delayq, pg-boss and graphile-worker on one PostgreSQL), drawn by
# scripts/bench-pg-peers.sh:
#   gnuplot -e "dir='bench/results'" bench/report/pg-peers-plots.gp
# Reads dir/pg-peers-plot-throughput.tsv (add-1, add-32, burst) and
# dir/pg-peers-plot-lateness.tsv (p50, p99, max in ms), each a header
# ("measurement", then a column per system) and a row per measurement, and
# draws dir/pg-peers.png: two panels of clustered bars, log y (the systems
# differ by orders of magnitude in lateness).
if (!exists("dir")) dir = "bench/results"
tp = dir . "/pg-peers-plot-throughput.tsv"
lt = dir . "/pg-peers-plot-lateness.tsv"
set terminal pngcairo size 1400,600 font ",10"
set termoption noenhanced
set output dir . "/pg-peers.png"
set datafile separator "\t"
set datafile missing ""
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set format y "%g"
set grid ytics mytics
set key below font ",9"
set multiplot layout 1,2
set title "one PostgreSQL, Node.js clients: jobs per second (median; higher is better)"
set ylabel "adds, or jobs run, per second"
plot for [c = 2:4] tp using c:xtic(1) title columnheader(c)
set title "lateness of 20,000 jobs due over 5 s (median of rounds; lower is better)"
set ylabel "ms after the due time"
plot for [c = 2:4] lt using c:xtic(1) title columnheader(c)
unset multiplot
