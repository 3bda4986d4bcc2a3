#!/bin/sh
# The house plan (docs/DESIGN.md) holds: every quoted #include is one the
# including layer may use.
#  - cmd/ and metal/ include only the public headers (lib/ruvllm.h,
#    lib/ruvllm_tools.h) and their own folder's;
#  - a lib/ folder includes its own headers, those of folders at its level
#    of the dependency graph or below (base < format < text < chat < engine
#    < convert < tools), the public headers and kernels/;
#  - kernels/ includes nothing of lib/.
# Unit tests (tests/) may reach private headers on purpose.
. tests/cli/lib.sh

rank() {
    case $1 in
    base) echo 0 ;; format) echo 1 ;; text) echo 2 ;; chat) echo 3 ;;
    engine) echo 4 ;; convert) echo 5 ;; tools) echo 6 ;; *) echo 99 ;;
    esac
}

# every "file: header" pair of quoted includes under the given folders
includes() {
    find "$@" -type f \( -name '*.c' -o -name '*.h' -o -name '*.m' -o -name '*.cpp' \) |
        sort | while read -r f; do
            sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
                while read -r h; do echo "$f $h"; done
        done
}

# check ROOT: one line per include that breaks the rules, under ROOT
check() (
    cd "$1" || exit 1
    includes cmd metal | while read -r f h; do
        d=$(dirname "$f")
        case $h in
        ruvllm.h | ruvllm_tools.h | version.h) continue ;;
        esac
        [ -f "$d/$h" ] && continue
        echo "$f includes \"$h\": outside lib/ only lib/ruvllm.h and lib/ruvllm_tools.h"
    done
    includes lib | while read -r f h; do
        d=$(dirname "$f")
        top=$(echo "$f" | cut -d/ -f2)
        case $h in
        ruvllm.h | ruvllm_tools.h) continue ;;
        esac
        [ -f "kernels/$h" ] && continue
        case $h in
        */*)
            hd=$(echo "$h" | cut -d/ -f1)
            if [ ! -f "lib/$h" ]; then
                echo "$f includes \"$h\": no such header lib/$h"
            elif [ "$(rank "$hd")" -gt "$(rank "$top")" ]; then
                echo "$f includes \"$h\": $top/ may not reach up into $hd/"
            fi
            ;;
        *)
            [ -f "$d/$h" ] || echo "$f includes \"$h\": write lib/ headers by path (\"engine/model.h\")"
            ;;
        esac
    done
    includes kernels | while read -r f h; do
        d=$(dirname "$f")
        [ -f "$d/$h" ] || [ -f "kernels/$h" ] || echo "$f includes \"$h\": kernels/ stands alone"
    done
)

check . >"$TMP/bad"
sed 's/^/# /' "$TMP/bad"
assert "every #include respects the layers (docs/DESIGN.md)" "[ ! -s '$TMP/bad' ]"

# the check itself: a private header from cmd/, an upward include in lib/
mkdir -p "$TMP/t/cmd" "$TMP/t/metal" "$TMP/t/lib/engine" "$TMP/t/lib/format" "$TMP/t/kernels"
: >"$TMP/t/lib/engine/model.h"
echo '#include "engine/model.h"' >"$TMP/t/cmd/x.c"
echo '#include "engine/model.h"' >"$TMP/t/lib/format/y.c"
echo '#include "ruvllm.h"' >"$TMP/t/metal/z.c"
check "$TMP/t" >"$TMP/bad2"
assert "a private header included from cmd/ is reported" "grep -q '^cmd/x.c' '$TMP/bad2'"
assert "format/ including engine/ is reported" "grep -q '^lib/format/y.c.*reach up' '$TMP/bad2'"
assert "a public header from metal/ is fine" "! grep -q '^metal/z.c' '$TMP/bad2'"

# lib/ folders are the plan's, and lib/ has no loose sources
for d in base format text chat chat/jinja engine convert tools; do
    assert "lib/$d/ exists" "[ -d lib/$d ]"
done
loose=$(find lib -maxdepth 1 -name '*.c' | wc -l)
assert "no source file directly in lib/" "[ $loose -eq 0 ]"

# the map is kept true: docs/DESIGN.md names every lib/ source file
for f in $(find lib -mindepth 2 -name '*.c' | sort); do
    b=$(basename "$f")
    assert "docs/DESIGN.md names $f" "grep -q -F -e '$b' docs/DESIGN.md"
done
finish
