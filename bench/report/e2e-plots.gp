# e2e-plots.gp - PNG plots of delayq-bench's results, drawn by scripts/bench-e2e.sh:
#   gnuplot -e "dir='bench/results'" bench/report/e2e-plots.gp
# Reads <dir>/e2e-plot-data/lateness.<design>.t<threads>.dat ("ms percent" per
# line: the percentiles 1..100 and 99.9 of one run) and throughput.dat
# ("design t1 t8 ..." schedule calls per second), and writes
#   <dir>/e2e-lateness-t<N>.png  lateness CDF per design, log x, for N = 1 and 8
#   <dir>/e2e-throughput.png     durable schedule throughput, bars per design
#   <dir>/e2e-durable-async.png  async_schedule() rate against requests in flight,
#                                per backend (durable-async.dat, delayq-bench durable)
if (!exists("dir")) dir = "bench/results"
data = dir . "/e2e-plot-data"
set terminal pngcairo size 900,600 font ",11"
set termoption noenhanced  # names like delayq-redis are not subscripts

# -------------------------------------------------------------- lateness CDF
set logscale x
set format x "%g"
set xlabel "lateness: execution start - due time (ms, log scale; values below 0.01 ms drawn at 0.01)"
set ylabel "percent of tasks at or below"
set yrange [0:100]
set grid xtics ytics mxtics
set key bottom right
do for [t in "1 8"] {
  files = system(sprintf("ls %s/lateness.*.t%s.dat 2>/dev/null", data, t))
  if (strlen(files) > 0) {
    set output sprintf("%s/e2e-lateness-t%s.png", dir, t)
    set title sprintf("lateness CDF per design, %s scheduling thread%s (delayq-memory: 1 thread, 1M tasks)", t, (t eq "1" ? "" : "s"))
    extra = (t eq "1") ? "" : system(sprintf("ls %s/lateness.delayq-memory.t1.dat 2>/dev/null", data))
    all = files . " " . extra
    plot for [f in all] f using ($1 < 0.01 ? 0.01 : $1):2 with lines lw 2 \
         title system(sprintf("basename %s .dat | sed 's/^lateness[.]//'", f))
  }
}

# -------------------------------------------------------------- throughput bars
unset logscale x
set format x "%g"
set autoscale y
set yrange [0:*]
set xlabel "design"
set ylabel "schedule calls per second (durable, acknowledged)"
set title "durable schedule throughput per design and scheduling threads"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid noxtics ytics
set key top left
set xtics nomirror
set output sprintf(dir . "/e2e-throughput.png")
columns = int(system(sprintf("head -n 1 %s/throughput.dat | wc -w", data)))
plot for [c = 2:columns] data . "/throughput.dat" using c:xtic(1) title columnheader(c)

# -------------------------------------------------------------- async against in flight
async = data . "/durable-async.dat"
if (system(sprintf("test -s %s && echo y", async)) eq "y") {
  set style data linespoints
  unset style fill
  set logscale x
  set xlabel "async_schedule() requests in flight (one thread, log scale)"
  set ylabel "acknowledged schedules per second"
  set title "durable async_schedule() throughput against concurrency, per backend"
  set grid xtics ytics
  set key top left
  set output dir . "/e2e-durable-async.png"
  ncol = int(system(sprintf("head -n 1 %s | wc -w", async)))
  plot for [c = 2:ncol] async using 1:c with linespoints lw 2 pt 7 title columnheader(c)
}
