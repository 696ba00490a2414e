# server-plots.gp - the throughput plot of delayq-bench-server, drawn by
# scripts/bench-server.sh:
#   gnuplot -e "datafile='bench/results/server-plot-data.tsv'; outfile='bench/results/server-throughput.png'" \
#     bench/report/server-plots.gp
# Reads a TSV with a header ("measurement" then one column per system) and a
# row per measurement (put-1, put-32, cycle-1, cycle-32: operations per
# second), and draws clustered bars, log y: fsync'd and in-memory systems
# differ by two orders of magnitude.
if (!exists("datafile")) datafile = "bench/results/server-plot-data.tsv"
if (!exists("outfile")) outfile = "bench/results/server-throughput.png"
set terminal pngcairo size 1000,600 font ",11"
set termoption noenhanced  # names like delayq-redis are not subscripts
set output outfile
set datafile separator "\t"
set title "delayq-server against beanstalkd: operations per second (median of the rounds, log scale)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set format y "%g"
set ylabel "per second (puts, or whole put+reserve+delete cycles)"
set xlabel "measurement (put-N / cycle-N: N connections)"
set grid ytics mytics
set key outside right top
ncols = int(system(sprintf("head -n 1 '%s' | awk -F'\t' '{print NF}'", datafile)))
plot for [c = 2:ncols] datafile using c:xtic(1) title columnheader(c)
