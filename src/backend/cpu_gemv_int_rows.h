/* cpu_gemv_int_rows: the row driver of the integer products (cpu_gemv_vnni.c, cpu_gemv_i16.c),
 * written once for both instruction sets.
 *
 * Not a normal header: a file includes it once, after defining
 *   INT_FN                        its functions' target attribute
 *   ROWS, INPUTS                  4 and 4: a pass's most rows and inputs
 *   pass                          a struct with the members r (first row) and i (first input)
 *   run_pass(p, fmt, rb, nb, y)   rb rows × nb inputs of NF2, INT4 or NF4 over whole rows
 *   run_pass_q4k, run_pass_b32    the same for Q4_K, and for Q4_0 and Q8_0
 *   run_pass_int8                 the same for INT8, when INT_PASS_INT8 is defined
 *   run_pass_wide(p, fmt, nb, y)  4 rows × nb <= WIDE_INPUTS inputs of NF2, INT4 or NF4 (and INT8
 *                                 with INT_PASS_INT8), taken for WIDE_MIN(fmt) inputs or more (the
 *                                 file's measured threshold)
 * The format and the pass shape become constants, so each pass is compiled for its own. */

/* The pass shapes, at most 8 (row, input) pairs so sums and accumulators stay in registers or
 * close to them. */
#define RUN_SHAPE(run, p, fmt, rb, nb, y)                                                                              \
    do {                                                                                                               \
        if ((rb) == 4 && (nb) == 1)                                                                                    \
            run(p, fmt, 4, 1, y);                                                                                      \
        else if ((rb) == 4)                                                                                            \
            run(p, fmt, 4, 2, y);                                                                                      \
        else if ((rb) == 2)                                                                                            \
            run(p, fmt, 2, 4, y);                                                                                      \
        else if ((nb) == 4)                                                                                            \
            run(p, fmt, 1, 4, y);                                                                                      \
        else if ((nb) == 2)                                                                                            \
            run(p, fmt, 1, 2, y);                                                                                      \
        else                                                                                                           \
            run(p, fmt, 1, 1, y);                                                                                      \
    } while (0)

INT_FN static void run_fmt(const pass *p, int rb, int nb, float *y) {
    switch (p->w->fmt) {
    case PP_WF_NF2: RUN_SHAPE(run_pass, p, PP_WF_NF2, rb, nb, y); break;
    case PP_WF_INT4: RUN_SHAPE(run_pass, p, PP_WF_INT4, rb, nb, y); break;
    case PP_WF_NF4: RUN_SHAPE(run_pass, p, PP_WF_NF4, rb, nb, y); break;
    case PP_WF_Q4K: RUN_SHAPE(run_pass_q4k, p, PP_WF_Q4K, rb, nb, y); break;
#ifdef INT_PASS_INT8
    case PP_WF_INT8: RUN_SHAPE(run_pass_int8, p, PP_WF_INT8, rb, nb, y); break;
#endif
    case PP_WF_Q4_0: RUN_SHAPE(run_pass_b32, p, PP_WF_Q4_0, rb, nb, y); break;
    case PP_WF_Q8_0: RUN_SHAPE(run_pass_b32, p, PP_WF_Q8_0, rb, nb, y); break;
    default: break; /* not taken: the family's handles() refuses the rest */
    }
}

/* Rows [r0, r1) of y[n][rows]: four rows at a time (a task's last rows one at a time) against up
 * to four inputs; four by four as two passes of two rows. A decoded weight vector feeds every
 * input of its pass, an activation vector every row. From WIDE_MIN(fmt) inputs on, the formats
 * with a wide pass run four rows against up to WIDE_INPUTS inputs in one pass, and only a task's
 * last 1-3 rows take the passes above. */
INT_FN static void run_rows(pass *p, int n, float *y, int64_t r0, int64_t r1) {
    const pp_wformat fmt = p->w->fmt;
    int wide = fmt == PP_WF_NF2 || fmt == PP_WF_INT4 || fmt == PP_WF_NF4;
#ifdef INT_PASS_INT8
    wide = wide || fmt == PP_WF_INT8;
#endif
    if (wide && n >= WIDE_MIN(fmt))
        for (; r1 - r0 >= ROWS; r0 += ROWS)
            for (p->r = r0, p->i = 0; p->i < n; p->i += WIDE_INPUTS) {
                int nb = n - p->i < WIDE_INPUTS ? n - p->i : WIDE_INPUTS;
                switch (fmt) { /* the format as a constant */
                case PP_WF_NF2: run_pass_wide(p, PP_WF_NF2, nb, y); break;
                case PP_WF_INT4: run_pass_wide(p, PP_WF_INT4, nb, y); break;
                case PP_WF_NF4: run_pass_wide(p, PP_WF_NF4, nb, y); break;
#ifdef INT_PASS_INT8
                case PP_WF_INT8: run_pass_wide(p, PP_WF_INT8, nb, y); break;
#endif
                default: break; /* not taken: wide holds the formats above */
                }
            }
    for (p->r = r0; p->r < r1;) {
        int rb = r1 - p->r >= ROWS ? ROWS : 1;
        for (p->i = 0; p->i < n;) {
            int nb = n - p->i >= INPUTS ? INPUTS : n - p->i >= 2 ? 2 : 1;
            if (rb == ROWS && nb == INPUTS) {
                run_fmt(p, 2, nb, y);
                p->r += 2;
                run_fmt(p, 2, nb, y);
                p->r -= 2;
            } else {
                run_fmt(p, rb, nb, y);
            }
            p->i += nb;
        }
        p->r += rb;
    }
}
