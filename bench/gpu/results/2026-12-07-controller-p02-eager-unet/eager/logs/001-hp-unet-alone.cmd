taskset -c 2,3,4,5,6,7,8 /opt/torch/.venv/bin/python3 /work/main/examples/pytorch/infer.py --model unet --batch 2 --serve
