/* gpu_predict.c — piper-sim's prediction of a plan, written as a small table for
 * check_kernels --bench to print next to its measurements. Runs on the build machine (it needs
 * SimGrid, which the GPU machine lacks), so the prediction exists before the GPU run.
 *
 * usage: gpu_predict PLAN OUT.tsv
 *
 * The table: the step as simulated (step time, tokens/s, MFU, device 0's peak memory, model
 * FLOPs), the GPU's figures, and per kernel identity of device 0 the number of instructions that
 * run it, the FLOPs and bytes of one instruction (its kernel list) and the cost model's seconds
 * for it (sim_kernel_seconds summed over the list, launch overheads included). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "sim/sim.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: gpu_predict PLAN OUT.tsv\n");
        return 2;
    }
    base_error e;
    base_error_clear(&e);
    plan_set p;
    if (plan_read_file(&p, argv[1], &e)) {
        base_error_print(&e, stderr);
        return 1;
    }
    sim_options o;
    sim_options_init(&o, &p);
    sim_result r;
    memset(&r, 0, sizeof r);
    if (sim_run(&p, &o, &r, &e)) {
        base_error_print(&e, stderr);
        plan_free(&p);
        return 1;
    }
    FILE *f = fopen(argv[2], "w");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fprintf(f, "# piper-sim's prediction of %s (model %s on %d x %s)\n", argv[1], p.model.name,
            p.ndevices, p.gpu.name);
    fprintf(f, "step_seconds\t%.9g\n", r.step_seconds);
    fprintf(f, "tokens_per_second\t%.9g\n", r.tokens_per_second);
    fprintf(f, "mfu\t%.9g\n", r.mfu);
    fprintf(f, "model_flops\t%.9g\n", r.model_flops);
    fprintf(f, "peak_bytes\t%.9g\n", r.ndevices > 0 ? r.dev[0].peak_bytes : 0.0);
    fprintf(f, "gpu\t%s\n", p.gpu.name);
    fprintf(f, "peak_bf16\t%.9g\n", p.gpu.peak_flops[PLAN_BF16]);
    fprintf(f, "hbm_bw\t%.9g\n", p.gpu.hbm_bw);
    fprintf(f, "# kernel\tidentity\tcount\tflops\tgemm_flops\tbytes\tseconds\n");
    const plan_list *l = plan_dev_list(&p, 0);
    for (int k = 0; k < p.nkernel_ids; k++) {
        int count = 0, first = -1;
        for (int i = 0; i < l->n; i++)
            if (l->ins[i].op == PLAN_COMPUTE && l->ins[i].kid == k) {
                if (first < 0) first = i;
                count++;
            }
        if (first < 0) continue;
        const plan_instr *in = &l->ins[first];
        double flops = 0, gemm = 0, bytes = 0, secs = 0;
        if (in->kernels >= 0) {
            const plan_kernel_list *kl = &p.kernel_lists[in->kernels];
            for (int j = 0; j < kl->n; j++) {
                flops += kl->k[j].flops;
                if (kl->k[j].kind == PLAN_KERNEL_GEMM) gemm += kl->k[j].flops;
                bytes += kl->k[j].bytes;
                secs += sim_kernel_seconds(&o.costs, &p.gpu, &kl->k[j]);
            }
        }
        fprintf(f, "kernel\t%s\t%d\t%.9g\t%.9g\t%.9g\t%.9g\n", p.kernel_ids[k], count, flops, gemm,
                bytes, secs);
    }
    fclose(f);
    printf("piper-sim: %s on %s: step %.2f ms, %.0f tokens/s, MFU %.1f%%, peak %.2f GiB -> %s\n",
           p.model.name, p.gpu.name, r.step_seconds * 1e3, r.tokens_per_second, 100 * r.mfu,
           (r.ndevices > 0 ? r.dev[0].peak_bytes : 0.0) / (1024.0 * 1024 * 1024), argv[2]);
    sim_result_free(&r);
    plan_free(&p);
    return 0;
}
