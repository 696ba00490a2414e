# peers-plots.gp - the plot of the peer benchmark (bench/peers, issue 32),
# drawn by scripts/bench-peers.sh:
#   gnuplot -e "dir='bench/results'" bench/report/peers-plots.gp
# Reads dir/peers-plot-beanstalk.tsv (table 1: put-1, cycle-1, cycle-8 per
# server) and dir/peers-plot-http.tsv (table 3: BullMQ and delayq), each a
# header ("measurement", then a column per system) and a row per
# measurement, and draws dir/peers-throughput.png: two panels of clustered
# bars, log y (fsync'd and in-memory servers differ by orders of magnitude).
if (!exists("dir")) dir = "bench/results"
bs = dir . "/peers-plot-beanstalk.tsv"
hp = dir . "/peers-plot-http.tsv"
set terminal pngcairo size 1400,600 font ",10"
set termoption noenhanced
set output dir . "/peers-throughput.png"
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
set title "beanstalk protocol, one Python client: per second (median)"
set ylabel "puts, or put+reserve+delete cycles, per second"
ncols = int(system(sprintf("head -n 1 '%s' | awk -F'\t' '{print NF}'", bs)))
plot for [c = 2:ncols] bs using c:xtic(1) title columnheader(c)
set title "BullMQ and delayq-server HTTP, same Redis, Node.js: per second (median)"
set ylabel "adds, GETs, or jobs run, per second"
ncols = int(system(sprintf("head -n 1 '%s' | awk -F'\t' '{print NF}'", hp)))
plot for [c = 2:ncols] hp using c:xtic(1) title columnheader(c)
unset multiplot
