mkdir -p $OUT/ov
R=$PWD
FIKIT_LOG_LEVEL=info timeout 60 .dist-gpu/bin/fikit-run --mode auto --run-iterations 5 --measure-runs 2 --db /tmp/auto.db --task-key autoprobe -- python3 examples/pytorch/infer.py --model resnet50 --requests 300 > $OUT/auto.out 2> $OUT/auto.err; echo "auto rc $?"; grep -E "fikit|auto|measure" $OUT/auto.err | cut -c1-200 | head -12; .dist-gpu/bin/fikit-profile --db /tmp/auto.db show autoprobe | grep -E "coverage|timing|^task"
OUT=$OUT/ov timeout 330 taskset -c 2-8 bench/gpu/measure_overhead.sh .dist-gpu --models resnet50 --requests 300 --warmup 20 --reps 10 --configs plain,measure-events,measure-events-whole > $OUT/ov/stdout.txt 2>&1
echo "overhead rc $?"; grep -v "^rep" $OUT/ov/stdout.txt | head -9; rm -f $OUT/ov/profiles.db*
timeout 120 bench/gpu/events_accuracy.sh --prefix .dist-gpu --out /tmp/acc --cpus 2-8 --events-sample 16 "eager-service=python3 $R/examples/pytorch/infer.py --model resnet50 --requests 300" "resnet50-train=python3 $R/examples/pytorch/train.py --model resnet50 --batch 32 --duration-s 8"
echo "acc rc $?"; grep -v calibrated /tmp/acc/summary.txt; grep -h coverage /tmp/acc/*/*-events.show
