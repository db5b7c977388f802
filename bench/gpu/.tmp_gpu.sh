for m in "resnet50" "resnet50 --cuda-graph"; do
  k=auto-$(echo $m | tr -d ' -')
  FIKIT_LOG_LEVEL=info timeout 90 .dist-gpu/bin/fikit-run --mode auto --run-iterations 5 --measure-runs 2 --db /tmp/auto.db --task-key $k -- python3 examples/pytorch/infer.py --model $m --requests 400 > /tmp/$k.out 2> /tmp/$k.err; echo "$k rc $?"; grep -E "stored|switching|share mode:|error|warn" /tmp/$k.err | cut -c1-160 | head -6; grep -o '"jct_us":{[^}]*}' /tmp/$k.out
  .dist-gpu/bin/fikit-profile --db /tmp/auto.db show $k | grep -E "coverage|^task"
done
FIKIT_LOG_LEVEL=info timeout 60 .dist-gpu/bin/fikit-run --mode measure --db /tmp/auto.db --task-key cupti-whole --run-iterations 5 -- python3 examples/pytorch/infer.py --model resnet50 --requests 100 2> /tmp/c.err > /dev/null; echo "cupti rc $?"; grep -E "stored" /tmp/c.err | head -3; .dist-gpu/bin/fikit-profile --db /tmp/auto.db show cupti-whole | grep -E "coverage|^task"
