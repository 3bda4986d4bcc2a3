// metal-emu-uses: metal/kv.metal
/*
 * test_kv - metal/kv.metal's KV quantize-and-append against kernels/kvq.h's
 * rvl_kvq_encode_row (and plain f16 / f32 rows), with and without the fused
 * RoPE of keys.
 *
 * A batch of tokens is appended at positions p0 .. p0 + n - 1 into pages
 * of a shuffled page table whose other bytes hold a pattern. Expected:
 *   F32, F16, Q8  every byte of every page equal to the CPU's result (the
 *                 pattern where nothing is written): the same float
 *                 operations, IEEE division and round-half-away;
 *   TQ4           the CPU sums |x|^2 and |c|^2 in double, the kernel in f32:
 *                 codes equal for at least 99% of the coordinates and any
 *                 other code one level away (a coordinate within rounding
 *                 of a cell boundary), norms g within 2^-9 relative, and
 *                 every other byte equal.
 * Shapes: head_dim 32, 64, 80 (short last Q8 group), 128, 1024 (TQ4's
 * largest); one and several kv heads; batches that start mid-page and
 * cross pages; RoPE normal / NeoX / partial on the appended rows.
 */
#include "mtl_testutil.h"

struct kv_shape {
    int fmt, hd, nkh, p0, n_tok, rope_mode, rope_dim;
};

static size_t kv_page_bytes(int fmt, int hd)
{
    return fmt == RVL_MTL_KV_F32 ? (size_t)32 * hd * 4 : rvl_kvq_page_bytes(fmt, RVL_KVQ_KEY, hd);
}

static void kv_case(const kv_shape &s)
{
    const int pt = 32, n_pages = (s.p0 + s.n_tok + pt - 1) / pt;
    const std::vector<int32_t> table = mt_perm(n_pages + 1);
    const size_t head_stride = kv_page_bytes(s.fmt, s.hd) + 8;
    const size_t page_stride = (size_t)s.nkh * head_stride + 24;
    std::vector<uint8_t> cache(table.size() * page_stride);
    for (size_t i = 0; i < cache.size(); i++)
        cache[i] = (uint8_t)(i * 37 + 11);
    const size_t xs = (size_t)s.nkh * s.hd + 3;
    std::vector<float> x = mt_gauss_vec((size_t)s.n_tok * xs);
    const int rd = s.rope_dim ? s.rope_dim : s.hd;
    std::vector<float> cs, sn;
    mt_rope_tables(s.p0 + s.n_tok, rd, 10000.0f, cs, sn);

    rvl_mtl_kv_append_args a = {};
    a.page_stride = page_stride;
    a.head_stride = head_stride;
    a.x_stride = xs;
    a.head_dim = s.hd;
    a.n_head_kv = s.nkh;
    a.n_tok = s.n_tok;
    a.fmt = s.fmt;
    a.page_tokens = pt;
    a.p0 = s.p0;
    a.rope_mode = s.rope_mode;
    a.rope_dim = rd;
    emu::Buffer bx(x.data(), x.size() * 4, "x"), bc(cache.data(), cache.size(), "cache");
    emu::Buffer bt(table.data(), table.size() * 4, "page_table");
    emu::Buffer bcos(cs.data(), cs.size() * 4, "cos"), bsin(sn.data(), sn.size() * 4, "sin");
    emu::Encoder e("rvl_kv_append_f32");
    e.set_value(0, a);
    e.set_buffer(1, bx);
    e.set_buffer(2, bc);
    e.set_buffer(3, bt);
    e.set_buffer(4, bcos);
    e.set_buffer(5, bsin);
    assert_int_equal(mt_dispatch(e, rvl_mtl_kv_append_dispatch(&a)), 0);

    /* the CPU's pages: RoPE on the host, then encode_row */
    std::vector<uint8_t> want = cache;
    for (int t = 0; t < s.n_tok; t++)
        for (int kh = 0; kh < s.nkh; kh++) {
            const int pos = s.p0 + t;
            std::vector<float> row(&x[t * xs + (size_t)kh * s.hd], &x[t * xs + (size_t)kh * s.hd] + s.hd);
            mt_rope_head(row.data(), s.rope_mode, rd, &cs[(size_t)pos * (rd / 2)],
                         &sn[(size_t)pos * (rd / 2)]);
            uint8_t *page = want.data() + (size_t)table[(size_t)(pos / pt)] * page_stride +
                            (size_t)kh * head_stride;
            if (s.fmt == RVL_MTL_KV_F32)
                memcpy(page + (size_t)(pos % pt) * s.hd * 4, row.data(), (size_t)s.hd * 4);
            else
                rvl_kvq_encode_row(s.fmt, RVL_KVQ_KEY, s.hd, row.data(), pos % pt, page);
        }

    const uint8_t *got = bc.data<uint8_t>();
    if (s.fmt != RVL_MTL_KV_TQ4) {
        for (size_t i = 0; i < cache.size(); i++)
            if (got[i] != want[i]) {
                fprintf(stderr, "kv append fmt %d hd %d: byte %zu is %02x, want %02x\n", s.fmt, s.hd, i,
                        got[i], want[i]);
                fail();
            }
        return;
    }
    /* TQ4: codes and norms within rounding, everything else exact */
    const size_t rb = (size_t)s.hd / 2;
    size_t n_codes = 0, n_diff = 0;
    std::vector<bool> checked(cache.size(), false);
    for (int t = 0; t < s.n_tok; t++)
        for (int kh = 0; kh < s.nkh; kh++) {
            const int pos = s.p0 + t, j = pos % pt;
            const size_t pg = (size_t)table[(size_t)(pos / pt)] * page_stride + (size_t)kh * head_stride;
            for (size_t b = 0; b < rb; b++) {
                const size_t o = pg + (size_t)j * rb + b;
                for (int sh = 0; sh < 8; sh += 4) {
                    const int cg = (got[o] >> sh) & 15, cw = (want[o] >> sh) & 15;
                    n_codes++;
                    if (cg != cw) {
                        n_diff++;
                        assert_true(abs(cg - cw) == 1);
                    }
                }
                checked[o] = true;
            }
            const size_t so = pg + 32 * rb + (size_t)j * 2;
            uint16_t hg, hw;
            memcpy(&hg, got + so, 2);
            memcpy(&hw, want.data() + so, 2);
            const float gg = rvl_f16_to_f32(hg), gw = rvl_f16_to_f32(hw);
            assert_true(fabsf(gg - gw) <= ldexpf(fabsf(gw), -9));
            checked[so] = checked[so + 1] = true;
        }
    assert_true(n_diff * 100 <= n_codes);
    for (size_t i = 0; i < cache.size(); i++)
        if (!checked[i] && got[i] != want[i]) {
            fprintf(stderr, "kv append tq4: byte %zu outside the rows is %02x, want %02x\n", i, got[i],
                    want[i]);
            fail();
        }
    if (mt_verbose())
        fprintf(stderr, "# tq4 hd %d: %zu of %zu codes differ\n", s.hd, n_diff, n_codes);
}

static void test_append_f16_q8_f32_gives_cpu_bytes(void **state)
{
    (void)state;
    const int R = RVL_MTL_ROPE_NORM, X = RVL_MTL_ROPE_NEOX, N = RVL_MTL_ROPE_NONE;
    for (int fmt : { RVL_MTL_KV_F16, RVL_MTL_KV_Q8, RVL_MTL_KV_F32 }) {
        const kv_shape cases[] = {
            { fmt, 64, 1, 0, 1, N, 0 },
            { fmt, 80, 2, 30, 5, R, 0 },    /* crosses a page; short Q8 group */
            { fmt, 128, 3, 7, 40, X, 64 },  /* partial rotary */
            { fmt, 32, 2, 64, 33, X, 0 },
        };
        for (const kv_shape &s : cases)
            kv_case(s);
    }
}

static void test_append_tq4_matches_cpu_encoding(void **state)
{
    (void)state;
    const int R = RVL_MTL_ROPE_NORM, X = RVL_MTL_ROPE_NEOX, N = RVL_MTL_ROPE_NONE;
    const int T = RVL_MTL_KV_TQ4;
    const kv_shape cases[] = {
        { T, 64, 2, 0, 40, N, 0 },
        { T, 128, 2, 31, 3, R, 0 },
        { T, 32, 1, 5, 60, X, 0 },
        { T, 1024, 1, 2, 4, N, 0 },
    };
    for (const kv_shape &s : cases)
        kv_case(s);
}

/* An all-zero row gets zero codes and a zero norm, as the CPU encodes it. */
static void test_append_tq4_zero_row(void **state)
{
    (void)state;
    const int hd = 64;
    std::vector<uint8_t> page(rvl_kvq_page_bytes(RVL_KVQ_TQ4, RVL_KVQ_KEY, hd), 0x5A);
    std::vector<float> x((size_t)hd, 0.0f);
    const int32_t table[1] = { 0 };
    rvl_mtl_kv_append_args a = {};
    a.page_stride = page.size();
    a.head_stride = page.size();
    a.x_stride = hd;
    a.head_dim = hd;
    a.n_head_kv = 1;
    a.n_tok = 1;
    a.fmt = RVL_MTL_KV_TQ4;
    a.page_tokens = 32;
    a.p0 = 3;
    emu::Buffer bx(x.data(), x.size() * 4, "x"), bp(page.data(), page.size(), "page");
    emu::Buffer bt(table, sizeof table, "table"), dummy(4, "unused");
    emu::Encoder e("rvl_kv_append_f32");
    e.set_value(0, a);
    e.set_buffer(1, bx);
    e.set_buffer(2, bp);
    e.set_buffer(3, bt);
    e.set_buffer(4, dummy);
    e.set_buffer(5, dummy);
    assert_int_equal(mt_dispatch(e, rvl_mtl_kv_append_dispatch(&a)), 0);
    std::vector<uint8_t> want = page;
    rvl_kvq_encode_row(RVL_KVQ_TQ4, RVL_KVQ_KEY, hd, x.data(), 3, want.data());
    assert_memory_equal(bp.data<uint8_t>(), want.data(), want.size());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_f16_q8_f32_gives_cpu_bytes),
        cmocka_unit_test(test_append_tq4_matches_cpu_encoding),
        cmocka_unit_test(test_append_tq4_zero_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
