mkdir -p $OUT/ov $OUT/acc
OUT=$OUT/ov timeout 400 taskset -c 2-8 bench/gpu/measure_overhead.sh .dist-gpu --models resnet50 --requests 300 --warmup 20 --reps 10 --configs plain,measure-events,measure-events/8,measure-events-whole > $OUT/ov/stdout.txt 2>&1
echo "overhead rc $?"; grep -v "^rep" $OUT/ov/stdout.txt | head -10; rm -f $OUT/ov/profiles.db*
R=$PWD
timeout 170 bench/gpu/events_accuracy.sh --prefix .dist-gpu --out /tmp/acc --cpus 2-8 --events-sample 16 "eager-service=python3 $R/examples/pytorch/infer.py --model resnet50 --requests 300" "resnet50-train=python3 $R/examples/pytorch/train.py --model resnet50 --batch 32 --duration-s 8" "transformer-train=python3 $R/examples/pytorch/train.py --model transformer --batch 16 --duration-s 8"
echo "acc rc $?"; grep -v calibrated /tmp/acc/summary.txt
cp /tmp/acc/summary.txt $OUT/acc/; for d in /tmp/acc/*/; do n=$(basename $d); cp $d/compare.txt $OUT/acc/$n-compare.txt; cp $d/$n-events.show $OUT/acc/$n-events.show; done; cd $OUT && tar czf acc.tgz acc && rm -rf acc
