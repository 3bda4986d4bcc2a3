/*
 * metal_swizzles.h - the swizzle members of metal::vec<T, N> (generated once;
 * every 2-, 3- and 4-component combination of the first N letters of xyzw).
 * Included by metal_stdlib inside each vec specialization's union.
 */
#ifndef RVL_METAL_SWIZZLES_H
#define RVL_METAL_SWIZZLES_H
#define EMU_SWIZZLES_2(T, S) \
    swizzle<T, S, 0, 0> xx; swizzle<T, S, 0, 1> xy; swizzle<T, S, 1, 0> yx; \
    swizzle<T, S, 1, 1> yy; swizzle<T, S, 0, 0, 0> xxx; swizzle<T, S, 0, 0, 1> xxy; \
    swizzle<T, S, 0, 1, 0> xyx; swizzle<T, S, 0, 1, 1> xyy; swizzle<T, S, 1, 0, 0> yxx; \
    swizzle<T, S, 1, 0, 1> yxy; swizzle<T, S, 1, 1, 0> yyx; swizzle<T, S, 1, 1, 1> yyy; \
    swizzle<T, S, 0, 0, 0, 0> xxxx; swizzle<T, S, 0, 0, 0, 1> xxxy; \
    swizzle<T, S, 0, 0, 1, 0> xxyx; swizzle<T, S, 0, 0, 1, 1> xxyy; \
    swizzle<T, S, 0, 1, 0, 0> xyxx; swizzle<T, S, 0, 1, 0, 1> xyxy; \
    swizzle<T, S, 0, 1, 1, 0> xyyx; swizzle<T, S, 0, 1, 1, 1> xyyy; \
    swizzle<T, S, 1, 0, 0, 0> yxxx; swizzle<T, S, 1, 0, 0, 1> yxxy; \
    swizzle<T, S, 1, 0, 1, 0> yxyx; swizzle<T, S, 1, 0, 1, 1> yxyy; \
    swizzle<T, S, 1, 1, 0, 0> yyxx; swizzle<T, S, 1, 1, 0, 1> yyxy; \
    swizzle<T, S, 1, 1, 1, 0> yyyx; swizzle<T, S, 1, 1, 1, 1> yyyy;

#define EMU_SWIZZLES_3(T, S) \
    swizzle<T, S, 0, 0> xx; swizzle<T, S, 0, 1> xy; swizzle<T, S, 0, 2> xz; \
    swizzle<T, S, 1, 0> yx; swizzle<T, S, 1, 1> yy; swizzle<T, S, 1, 2> yz; \
    swizzle<T, S, 2, 0> zx; swizzle<T, S, 2, 1> zy; swizzle<T, S, 2, 2> zz; \
    swizzle<T, S, 0, 0, 0> xxx; swizzle<T, S, 0, 0, 1> xxy; swizzle<T, S, 0, 0, 2> xxz; \
    swizzle<T, S, 0, 1, 0> xyx; swizzle<T, S, 0, 1, 1> xyy; swizzle<T, S, 0, 1, 2> xyz; \
    swizzle<T, S, 0, 2, 0> xzx; swizzle<T, S, 0, 2, 1> xzy; swizzle<T, S, 0, 2, 2> xzz; \
    swizzle<T, S, 1, 0, 0> yxx; swizzle<T, S, 1, 0, 1> yxy; swizzle<T, S, 1, 0, 2> yxz; \
    swizzle<T, S, 1, 1, 0> yyx; swizzle<T, S, 1, 1, 1> yyy; swizzle<T, S, 1, 1, 2> yyz; \
    swizzle<T, S, 1, 2, 0> yzx; swizzle<T, S, 1, 2, 1> yzy; swizzle<T, S, 1, 2, 2> yzz; \
    swizzle<T, S, 2, 0, 0> zxx; swizzle<T, S, 2, 0, 1> zxy; swizzle<T, S, 2, 0, 2> zxz; \
    swizzle<T, S, 2, 1, 0> zyx; swizzle<T, S, 2, 1, 1> zyy; swizzle<T, S, 2, 1, 2> zyz; \
    swizzle<T, S, 2, 2, 0> zzx; swizzle<T, S, 2, 2, 1> zzy; swizzle<T, S, 2, 2, 2> zzz; \
    swizzle<T, S, 0, 0, 0, 0> xxxx; swizzle<T, S, 0, 0, 0, 1> xxxy; \
    swizzle<T, S, 0, 0, 0, 2> xxxz; swizzle<T, S, 0, 0, 1, 0> xxyx; \
    swizzle<T, S, 0, 0, 1, 1> xxyy; swizzle<T, S, 0, 0, 1, 2> xxyz; \
    swizzle<T, S, 0, 0, 2, 0> xxzx; swizzle<T, S, 0, 0, 2, 1> xxzy; \
    swizzle<T, S, 0, 0, 2, 2> xxzz; swizzle<T, S, 0, 1, 0, 0> xyxx; \
    swizzle<T, S, 0, 1, 0, 1> xyxy; swizzle<T, S, 0, 1, 0, 2> xyxz; \
    swizzle<T, S, 0, 1, 1, 0> xyyx; swizzle<T, S, 0, 1, 1, 1> xyyy; \
    swizzle<T, S, 0, 1, 1, 2> xyyz; swizzle<T, S, 0, 1, 2, 0> xyzx; \
    swizzle<T, S, 0, 1, 2, 1> xyzy; swizzle<T, S, 0, 1, 2, 2> xyzz; \
    swizzle<T, S, 0, 2, 0, 0> xzxx; swizzle<T, S, 0, 2, 0, 1> xzxy; \
    swizzle<T, S, 0, 2, 0, 2> xzxz; swizzle<T, S, 0, 2, 1, 0> xzyx; \
    swizzle<T, S, 0, 2, 1, 1> xzyy; swizzle<T, S, 0, 2, 1, 2> xzyz; \
    swizzle<T, S, 0, 2, 2, 0> xzzx; swizzle<T, S, 0, 2, 2, 1> xzzy; \
    swizzle<T, S, 0, 2, 2, 2> xzzz; swizzle<T, S, 1, 0, 0, 0> yxxx; \
    swizzle<T, S, 1, 0, 0, 1> yxxy; swizzle<T, S, 1, 0, 0, 2> yxxz; \
    swizzle<T, S, 1, 0, 1, 0> yxyx; swizzle<T, S, 1, 0, 1, 1> yxyy; \
    swizzle<T, S, 1, 0, 1, 2> yxyz; swizzle<T, S, 1, 0, 2, 0> yxzx; \
    swizzle<T, S, 1, 0, 2, 1> yxzy; swizzle<T, S, 1, 0, 2, 2> yxzz; \
    swizzle<T, S, 1, 1, 0, 0> yyxx; swizzle<T, S, 1, 1, 0, 1> yyxy; \
    swizzle<T, S, 1, 1, 0, 2> yyxz; swizzle<T, S, 1, 1, 1, 0> yyyx; \
    swizzle<T, S, 1, 1, 1, 1> yyyy; swizzle<T, S, 1, 1, 1, 2> yyyz; \
    swizzle<T, S, 1, 1, 2, 0> yyzx; swizzle<T, S, 1, 1, 2, 1> yyzy; \
    swizzle<T, S, 1, 1, 2, 2> yyzz; swizzle<T, S, 1, 2, 0, 0> yzxx; \
    swizzle<T, S, 1, 2, 0, 1> yzxy; swizzle<T, S, 1, 2, 0, 2> yzxz; \
    swizzle<T, S, 1, 2, 1, 0> yzyx; swizzle<T, S, 1, 2, 1, 1> yzyy; \
    swizzle<T, S, 1, 2, 1, 2> yzyz; swizzle<T, S, 1, 2, 2, 0> yzzx; \
    swizzle<T, S, 1, 2, 2, 1> yzzy; swizzle<T, S, 1, 2, 2, 2> yzzz; \
    swizzle<T, S, 2, 0, 0, 0> zxxx; swizzle<T, S, 2, 0, 0, 1> zxxy; \
    swizzle<T, S, 2, 0, 0, 2> zxxz; swizzle<T, S, 2, 0, 1, 0> zxyx; \
    swizzle<T, S, 2, 0, 1, 1> zxyy; swizzle<T, S, 2, 0, 1, 2> zxyz; \
    swizzle<T, S, 2, 0, 2, 0> zxzx; swizzle<T, S, 2, 0, 2, 1> zxzy; \
    swizzle<T, S, 2, 0, 2, 2> zxzz; swizzle<T, S, 2, 1, 0, 0> zyxx; \
    swizzle<T, S, 2, 1, 0, 1> zyxy; swizzle<T, S, 2, 1, 0, 2> zyxz; \
    swizzle<T, S, 2, 1, 1, 0> zyyx; swizzle<T, S, 2, 1, 1, 1> zyyy; \
    swizzle<T, S, 2, 1, 1, 2> zyyz; swizzle<T, S, 2, 1, 2, 0> zyzx; \
    swizzle<T, S, 2, 1, 2, 1> zyzy; swizzle<T, S, 2, 1, 2, 2> zyzz; \
    swizzle<T, S, 2, 2, 0, 0> zzxx; swizzle<T, S, 2, 2, 0, 1> zzxy; \
    swizzle<T, S, 2, 2, 0, 2> zzxz; swizzle<T, S, 2, 2, 1, 0> zzyx; \
    swizzle<T, S, 2, 2, 1, 1> zzyy; swizzle<T, S, 2, 2, 1, 2> zzyz; \
    swizzle<T, S, 2, 2, 2, 0> zzzx; swizzle<T, S, 2, 2, 2, 1> zzzy; \
    swizzle<T, S, 2, 2, 2, 2> zzzz;

#define EMU_SWIZZLES_4(T, S) \
    swizzle<T, S, 0, 0> xx; swizzle<T, S, 0, 1> xy; swizzle<T, S, 0, 2> xz; \
    swizzle<T, S, 0, 3> xw; swizzle<T, S, 1, 0> yx; swizzle<T, S, 1, 1> yy; \
    swizzle<T, S, 1, 2> yz; swizzle<T, S, 1, 3> yw; swizzle<T, S, 2, 0> zx; \
    swizzle<T, S, 2, 1> zy; swizzle<T, S, 2, 2> zz; swizzle<T, S, 2, 3> zw; \
    swizzle<T, S, 3, 0> wx; swizzle<T, S, 3, 1> wy; swizzle<T, S, 3, 2> wz; \
    swizzle<T, S, 3, 3> ww; swizzle<T, S, 0, 0, 0> xxx; swizzle<T, S, 0, 0, 1> xxy; \
    swizzle<T, S, 0, 0, 2> xxz; swizzle<T, S, 0, 0, 3> xxw; swizzle<T, S, 0, 1, 0> xyx; \
    swizzle<T, S, 0, 1, 1> xyy; swizzle<T, S, 0, 1, 2> xyz; swizzle<T, S, 0, 1, 3> xyw; \
    swizzle<T, S, 0, 2, 0> xzx; swizzle<T, S, 0, 2, 1> xzy; swizzle<T, S, 0, 2, 2> xzz; \
    swizzle<T, S, 0, 2, 3> xzw; swizzle<T, S, 0, 3, 0> xwx; swizzle<T, S, 0, 3, 1> xwy; \
    swizzle<T, S, 0, 3, 2> xwz; swizzle<T, S, 0, 3, 3> xww; swizzle<T, S, 1, 0, 0> yxx; \
    swizzle<T, S, 1, 0, 1> yxy; swizzle<T, S, 1, 0, 2> yxz; swizzle<T, S, 1, 0, 3> yxw; \
    swizzle<T, S, 1, 1, 0> yyx; swizzle<T, S, 1, 1, 1> yyy; swizzle<T, S, 1, 1, 2> yyz; \
    swizzle<T, S, 1, 1, 3> yyw; swizzle<T, S, 1, 2, 0> yzx; swizzle<T, S, 1, 2, 1> yzy; \
    swizzle<T, S, 1, 2, 2> yzz; swizzle<T, S, 1, 2, 3> yzw; swizzle<T, S, 1, 3, 0> ywx; \
    swizzle<T, S, 1, 3, 1> ywy; swizzle<T, S, 1, 3, 2> ywz; swizzle<T, S, 1, 3, 3> yww; \
    swizzle<T, S, 2, 0, 0> zxx; swizzle<T, S, 2, 0, 1> zxy; swizzle<T, S, 2, 0, 2> zxz; \
    swizzle<T, S, 2, 0, 3> zxw; swizzle<T, S, 2, 1, 0> zyx; swizzle<T, S, 2, 1, 1> zyy; \
    swizzle<T, S, 2, 1, 2> zyz; swizzle<T, S, 2, 1, 3> zyw; swizzle<T, S, 2, 2, 0> zzx; \
    swizzle<T, S, 2, 2, 1> zzy; swizzle<T, S, 2, 2, 2> zzz; swizzle<T, S, 2, 2, 3> zzw; \
    swizzle<T, S, 2, 3, 0> zwx; swizzle<T, S, 2, 3, 1> zwy; swizzle<T, S, 2, 3, 2> zwz; \
    swizzle<T, S, 2, 3, 3> zww; swizzle<T, S, 3, 0, 0> wxx; swizzle<T, S, 3, 0, 1> wxy; \
    swizzle<T, S, 3, 0, 2> wxz; swizzle<T, S, 3, 0, 3> wxw; swizzle<T, S, 3, 1, 0> wyx; \
    swizzle<T, S, 3, 1, 1> wyy; swizzle<T, S, 3, 1, 2> wyz; swizzle<T, S, 3, 1, 3> wyw; \
    swizzle<T, S, 3, 2, 0> wzx; swizzle<T, S, 3, 2, 1> wzy; swizzle<T, S, 3, 2, 2> wzz; \
    swizzle<T, S, 3, 2, 3> wzw; swizzle<T, S, 3, 3, 0> wwx; swizzle<T, S, 3, 3, 1> wwy; \
    swizzle<T, S, 3, 3, 2> wwz; swizzle<T, S, 3, 3, 3> www; swizzle<T, S, 0, 0, 0, 0> xxxx; \
    swizzle<T, S, 0, 0, 0, 1> xxxy; swizzle<T, S, 0, 0, 0, 2> xxxz; \
    swizzle<T, S, 0, 0, 0, 3> xxxw; swizzle<T, S, 0, 0, 1, 0> xxyx; \
    swizzle<T, S, 0, 0, 1, 1> xxyy; swizzle<T, S, 0, 0, 1, 2> xxyz; \
    swizzle<T, S, 0, 0, 1, 3> xxyw; swizzle<T, S, 0, 0, 2, 0> xxzx; \
    swizzle<T, S, 0, 0, 2, 1> xxzy; swizzle<T, S, 0, 0, 2, 2> xxzz; \
    swizzle<T, S, 0, 0, 2, 3> xxzw; swizzle<T, S, 0, 0, 3, 0> xxwx; \
    swizzle<T, S, 0, 0, 3, 1> xxwy; swizzle<T, S, 0, 0, 3, 2> xxwz; \
    swizzle<T, S, 0, 0, 3, 3> xxww; swizzle<T, S, 0, 1, 0, 0> xyxx; \
    swizzle<T, S, 0, 1, 0, 1> xyxy; swizzle<T, S, 0, 1, 0, 2> xyxz; \
    swizzle<T, S, 0, 1, 0, 3> xyxw; swizzle<T, S, 0, 1, 1, 0> xyyx; \
    swizzle<T, S, 0, 1, 1, 1> xyyy; swizzle<T, S, 0, 1, 1, 2> xyyz; \
    swizzle<T, S, 0, 1, 1, 3> xyyw; swizzle<T, S, 0, 1, 2, 0> xyzx; \
    swizzle<T, S, 0, 1, 2, 1> xyzy; swizzle<T, S, 0, 1, 2, 2> xyzz; \
    swizzle<T, S, 0, 1, 2, 3> xyzw; swizzle<T, S, 0, 1, 3, 0> xywx; \
    swizzle<T, S, 0, 1, 3, 1> xywy; swizzle<T, S, 0, 1, 3, 2> xywz; \
    swizzle<T, S, 0, 1, 3, 3> xyww; swizzle<T, S, 0, 2, 0, 0> xzxx; \
    swizzle<T, S, 0, 2, 0, 1> xzxy; swizzle<T, S, 0, 2, 0, 2> xzxz; \
    swizzle<T, S, 0, 2, 0, 3> xzxw; swizzle<T, S, 0, 2, 1, 0> xzyx; \
    swizzle<T, S, 0, 2, 1, 1> xzyy; swizzle<T, S, 0, 2, 1, 2> xzyz; \
    swizzle<T, S, 0, 2, 1, 3> xzyw; swizzle<T, S, 0, 2, 2, 0> xzzx; \
    swizzle<T, S, 0, 2, 2, 1> xzzy; swizzle<T, S, 0, 2, 2, 2> xzzz; \
    swizzle<T, S, 0, 2, 2, 3> xzzw; swizzle<T, S, 0, 2, 3, 0> xzwx; \
    swizzle<T, S, 0, 2, 3, 1> xzwy; swizzle<T, S, 0, 2, 3, 2> xzwz; \
    swizzle<T, S, 0, 2, 3, 3> xzww; swizzle<T, S, 0, 3, 0, 0> xwxx; \
    swizzle<T, S, 0, 3, 0, 1> xwxy; swizzle<T, S, 0, 3, 0, 2> xwxz; \
    swizzle<T, S, 0, 3, 0, 3> xwxw; swizzle<T, S, 0, 3, 1, 0> xwyx; \
    swizzle<T, S, 0, 3, 1, 1> xwyy; swizzle<T, S, 0, 3, 1, 2> xwyz; \
    swizzle<T, S, 0, 3, 1, 3> xwyw; swizzle<T, S, 0, 3, 2, 0> xwzx; \
    swizzle<T, S, 0, 3, 2, 1> xwzy; swizzle<T, S, 0, 3, 2, 2> xwzz; \
    swizzle<T, S, 0, 3, 2, 3> xwzw; swizzle<T, S, 0, 3, 3, 0> xwwx; \
    swizzle<T, S, 0, 3, 3, 1> xwwy; swizzle<T, S, 0, 3, 3, 2> xwwz; \
    swizzle<T, S, 0, 3, 3, 3> xwww; swizzle<T, S, 1, 0, 0, 0> yxxx; \
    swizzle<T, S, 1, 0, 0, 1> yxxy; swizzle<T, S, 1, 0, 0, 2> yxxz; \
    swizzle<T, S, 1, 0, 0, 3> yxxw; swizzle<T, S, 1, 0, 1, 0> yxyx; \
    swizzle<T, S, 1, 0, 1, 1> yxyy; swizzle<T, S, 1, 0, 1, 2> yxyz; \
    swizzle<T, S, 1, 0, 1, 3> yxyw; swizzle<T, S, 1, 0, 2, 0> yxzx; \
    swizzle<T, S, 1, 0, 2, 1> yxzy; swizzle<T, S, 1, 0, 2, 2> yxzz; \
    swizzle<T, S, 1, 0, 2, 3> yxzw; swizzle<T, S, 1, 0, 3, 0> yxwx; \
    swizzle<T, S, 1, 0, 3, 1> yxwy; swizzle<T, S, 1, 0, 3, 2> yxwz; \
    swizzle<T, S, 1, 0, 3, 3> yxww; swizzle<T, S, 1, 1, 0, 0> yyxx; \
    swizzle<T, S, 1, 1, 0, 1> yyxy; swizzle<T, S, 1, 1, 0, 2> yyxz; \
    swizzle<T, S, 1, 1, 0, 3> yyxw; swizzle<T, S, 1, 1, 1, 0> yyyx; \
    swizzle<T, S, 1, 1, 1, 1> yyyy; swizzle<T, S, 1, 1, 1, 2> yyyz; \
    swizzle<T, S, 1, 1, 1, 3> yyyw; swizzle<T, S, 1, 1, 2, 0> yyzx; \
    swizzle<T, S, 1, 1, 2, 1> yyzy; swizzle<T, S, 1, 1, 2, 2> yyzz; \
    swizzle<T, S, 1, 1, 2, 3> yyzw; swizzle<T, S, 1, 1, 3, 0> yywx; \
    swizzle<T, S, 1, 1, 3, 1> yywy; swizzle<T, S, 1, 1, 3, 2> yywz; \
    swizzle<T, S, 1, 1, 3, 3> yyww; swizzle<T, S, 1, 2, 0, 0> yzxx; \
    swizzle<T, S, 1, 2, 0, 1> yzxy; swizzle<T, S, 1, 2, 0, 2> yzxz; \
    swizzle<T, S, 1, 2, 0, 3> yzxw; swizzle<T, S, 1, 2, 1, 0> yzyx; \
    swizzle<T, S, 1, 2, 1, 1> yzyy; swizzle<T, S, 1, 2, 1, 2> yzyz; \
    swizzle<T, S, 1, 2, 1, 3> yzyw; swizzle<T, S, 1, 2, 2, 0> yzzx; \
    swizzle<T, S, 1, 2, 2, 1> yzzy; swizzle<T, S, 1, 2, 2, 2> yzzz; \
    swizzle<T, S, 1, 2, 2, 3> yzzw; swizzle<T, S, 1, 2, 3, 0> yzwx; \
    swizzle<T, S, 1, 2, 3, 1> yzwy; swizzle<T, S, 1, 2, 3, 2> yzwz; \
    swizzle<T, S, 1, 2, 3, 3> yzww; swizzle<T, S, 1, 3, 0, 0> ywxx; \
    swizzle<T, S, 1, 3, 0, 1> ywxy; swizzle<T, S, 1, 3, 0, 2> ywxz; \
    swizzle<T, S, 1, 3, 0, 3> ywxw; swizzle<T, S, 1, 3, 1, 0> ywyx; \
    swizzle<T, S, 1, 3, 1, 1> ywyy; swizzle<T, S, 1, 3, 1, 2> ywyz; \
    swizzle<T, S, 1, 3, 1, 3> ywyw; swizzle<T, S, 1, 3, 2, 0> ywzx; \
    swizzle<T, S, 1, 3, 2, 1> ywzy; swizzle<T, S, 1, 3, 2, 2> ywzz; \
    swizzle<T, S, 1, 3, 2, 3> ywzw; swizzle<T, S, 1, 3, 3, 0> ywwx; \
    swizzle<T, S, 1, 3, 3, 1> ywwy; swizzle<T, S, 1, 3, 3, 2> ywwz; \
    swizzle<T, S, 1, 3, 3, 3> ywww; swizzle<T, S, 2, 0, 0, 0> zxxx; \
    swizzle<T, S, 2, 0, 0, 1> zxxy; swizzle<T, S, 2, 0, 0, 2> zxxz; \
    swizzle<T, S, 2, 0, 0, 3> zxxw; swizzle<T, S, 2, 0, 1, 0> zxyx; \
    swizzle<T, S, 2, 0, 1, 1> zxyy; swizzle<T, S, 2, 0, 1, 2> zxyz; \
    swizzle<T, S, 2, 0, 1, 3> zxyw; swizzle<T, S, 2, 0, 2, 0> zxzx; \
    swizzle<T, S, 2, 0, 2, 1> zxzy; swizzle<T, S, 2, 0, 2, 2> zxzz; \
    swizzle<T, S, 2, 0, 2, 3> zxzw; swizzle<T, S, 2, 0, 3, 0> zxwx; \
    swizzle<T, S, 2, 0, 3, 1> zxwy; swizzle<T, S, 2, 0, 3, 2> zxwz; \
    swizzle<T, S, 2, 0, 3, 3> zxww; swizzle<T, S, 2, 1, 0, 0> zyxx; \
    swizzle<T, S, 2, 1, 0, 1> zyxy; swizzle<T, S, 2, 1, 0, 2> zyxz; \
    swizzle<T, S, 2, 1, 0, 3> zyxw; swizzle<T, S, 2, 1, 1, 0> zyyx; \
    swizzle<T, S, 2, 1, 1, 1> zyyy; swizzle<T, S, 2, 1, 1, 2> zyyz; \
    swizzle<T, S, 2, 1, 1, 3> zyyw; swizzle<T, S, 2, 1, 2, 0> zyzx; \
    swizzle<T, S, 2, 1, 2, 1> zyzy; swizzle<T, S, 2, 1, 2, 2> zyzz; \
    swizzle<T, S, 2, 1, 2, 3> zyzw; swizzle<T, S, 2, 1, 3, 0> zywx; \
    swizzle<T, S, 2, 1, 3, 1> zywy; swizzle<T, S, 2, 1, 3, 2> zywz; \
    swizzle<T, S, 2, 1, 3, 3> zyww; swizzle<T, S, 2, 2, 0, 0> zzxx; \
    swizzle<T, S, 2, 2, 0, 1> zzxy; swizzle<T, S, 2, 2, 0, 2> zzxz; \
    swizzle<T, S, 2, 2, 0, 3> zzxw; swizzle<T, S, 2, 2, 1, 0> zzyx; \
    swizzle<T, S, 2, 2, 1, 1> zzyy; swizzle<T, S, 2, 2, 1, 2> zzyz; \
    swizzle<T, S, 2, 2, 1, 3> zzyw; swizzle<T, S, 2, 2, 2, 0> zzzx; \
    swizzle<T, S, 2, 2, 2, 1> zzzy; swizzle<T, S, 2, 2, 2, 2> zzzz; \
    swizzle<T, S, 2, 2, 2, 3> zzzw; swizzle<T, S, 2, 2, 3, 0> zzwx; \
    swizzle<T, S, 2, 2, 3, 1> zzwy; swizzle<T, S, 2, 2, 3, 2> zzwz; \
    swizzle<T, S, 2, 2, 3, 3> zzww; swizzle<T, S, 2, 3, 0, 0> zwxx; \
    swizzle<T, S, 2, 3, 0, 1> zwxy; swizzle<T, S, 2, 3, 0, 2> zwxz; \
    swizzle<T, S, 2, 3, 0, 3> zwxw; swizzle<T, S, 2, 3, 1, 0> zwyx; \
    swizzle<T, S, 2, 3, 1, 1> zwyy; swizzle<T, S, 2, 3, 1, 2> zwyz; \
    swizzle<T, S, 2, 3, 1, 3> zwyw; swizzle<T, S, 2, 3, 2, 0> zwzx; \
    swizzle<T, S, 2, 3, 2, 1> zwzy; swizzle<T, S, 2, 3, 2, 2> zwzz; \
    swizzle<T, S, 2, 3, 2, 3> zwzw; swizzle<T, S, 2, 3, 3, 0> zwwx; \
    swizzle<T, S, 2, 3, 3, 1> zwwy; swizzle<T, S, 2, 3, 3, 2> zwwz; \
    swizzle<T, S, 2, 3, 3, 3> zwww; swizzle<T, S, 3, 0, 0, 0> wxxx; \
    swizzle<T, S, 3, 0, 0, 1> wxxy; swizzle<T, S, 3, 0, 0, 2> wxxz; \
    swizzle<T, S, 3, 0, 0, 3> wxxw; swizzle<T, S, 3, 0, 1, 0> wxyx; \
    swizzle<T, S, 3, 0, 1, 1> wxyy; swizzle<T, S, 3, 0, 1, 2> wxyz; \
    swizzle<T, S, 3, 0, 1, 3> wxyw; swizzle<T, S, 3, 0, 2, 0> wxzx; \
    swizzle<T, S, 3, 0, 2, 1> wxzy; swizzle<T, S, 3, 0, 2, 2> wxzz; \
    swizzle<T, S, 3, 0, 2, 3> wxzw; swizzle<T, S, 3, 0, 3, 0> wxwx; \
    swizzle<T, S, 3, 0, 3, 1> wxwy; swizzle<T, S, 3, 0, 3, 2> wxwz; \
    swizzle<T, S, 3, 0, 3, 3> wxww; swizzle<T, S, 3, 1, 0, 0> wyxx; \
    swizzle<T, S, 3, 1, 0, 1> wyxy; swizzle<T, S, 3, 1, 0, 2> wyxz; \
    swizzle<T, S, 3, 1, 0, 3> wyxw; swizzle<T, S, 3, 1, 1, 0> wyyx; \
    swizzle<T, S, 3, 1, 1, 1> wyyy; swizzle<T, S, 3, 1, 1, 2> wyyz; \
    swizzle<T, S, 3, 1, 1, 3> wyyw; swizzle<T, S, 3, 1, 2, 0> wyzx; \
    swizzle<T, S, 3, 1, 2, 1> wyzy; swizzle<T, S, 3, 1, 2, 2> wyzz; \
    swizzle<T, S, 3, 1, 2, 3> wyzw; swizzle<T, S, 3, 1, 3, 0> wywx; \
    swizzle<T, S, 3, 1, 3, 1> wywy; swizzle<T, S, 3, 1, 3, 2> wywz; \
    swizzle<T, S, 3, 1, 3, 3> wyww; swizzle<T, S, 3, 2, 0, 0> wzxx; \
    swizzle<T, S, 3, 2, 0, 1> wzxy; swizzle<T, S, 3, 2, 0, 2> wzxz; \
    swizzle<T, S, 3, 2, 0, 3> wzxw; swizzle<T, S, 3, 2, 1, 0> wzyx; \
    swizzle<T, S, 3, 2, 1, 1> wzyy; swizzle<T, S, 3, 2, 1, 2> wzyz; \
    swizzle<T, S, 3, 2, 1, 3> wzyw; swizzle<T, S, 3, 2, 2, 0> wzzx; \
    swizzle<T, S, 3, 2, 2, 1> wzzy; swizzle<T, S, 3, 2, 2, 2> wzzz; \
    swizzle<T, S, 3, 2, 2, 3> wzzw; swizzle<T, S, 3, 2, 3, 0> wzwx; \
    swizzle<T, S, 3, 2, 3, 1> wzwy; swizzle<T, S, 3, 2, 3, 2> wzwz; \
    swizzle<T, S, 3, 2, 3, 3> wzww; swizzle<T, S, 3, 3, 0, 0> wwxx; \
    swizzle<T, S, 3, 3, 0, 1> wwxy; swizzle<T, S, 3, 3, 0, 2> wwxz; \
    swizzle<T, S, 3, 3, 0, 3> wwxw; swizzle<T, S, 3, 3, 1, 0> wwyx; \
    swizzle<T, S, 3, 3, 1, 1> wwyy; swizzle<T, S, 3, 3, 1, 2> wwyz; \
    swizzle<T, S, 3, 3, 1, 3> wwyw; swizzle<T, S, 3, 3, 2, 0> wwzx; \
    swizzle<T, S, 3, 3, 2, 1> wwzy; swizzle<T, S, 3, 3, 2, 2> wwzz; \
    swizzle<T, S, 3, 3, 2, 3> wwzw; swizzle<T, S, 3, 3, 3, 0> wwwx; \
    swizzle<T, S, 3, 3, 3, 1> wwwy; swizzle<T, S, 3, 3, 3, 2> wwwz; \
    swizzle<T, S, 3, 3, 3, 3> wwww;
#endif
