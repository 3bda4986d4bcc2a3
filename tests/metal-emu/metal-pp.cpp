/*
 * metal-pp - the emulator's source pre-pass: turns one .metal file into a C++
 * translation unit that clang++ compiles against include/metal_stdlib.
 *
 *   metal-pp IN.metal OUT.cpp
 *
 * What it rewrites (in place, keeping every line where it was, so compiler
 * messages point into the .metal file through #line):
 *   - [[...]] attributes that are not standard C++: removed, after reading the
 *     kernel-related ones (kernel, host_name, max_total_threads_per_threadgroup,
 *     buffer(n), threadgroup(n), the thread-position attributes);
 *   - the keywords kernel, device, thread (removed), constant (-> const);
 *   - `threadgroup T name[dims];` in a body -> one shared allocation per
 *     threadgroup (emu_rt::tg_var); other uses of threadgroup are removed;
 *   - floating literals: 1.5 -> 1.5f (MSL has no double), 1.5h -> half;
 *   - #include "x.metal" is inlined (pre-passed too).
 * and appends one emu_rt::registrar per kernel: non-template kernels under
 * their name, template instantiations under their host_name, each with its
 * parameters' binding slots.
 */
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

enum tk { IDENT, NUMBER, STRING, PUNCT, PP, ATTR };

struct token {
    tk kind;
    size_t b, e; /* [b, e) in the source */
    int line;
    std::string text;
    std::vector<std::string> attrs; /* ATTR: the attribute list, one entry each */
    bool standard = false;          /* ATTR: only standard C++ attributes */
};

struct edit {
    size_t b, e;
    std::string text;
};

struct param {
    std::string name;
    std::string slot; /* C++ initializer of emu_rt::slot */
};

struct kernel_def {
    std::string name, host_name, file;
    bool is_template = false;
    std::vector<param> params;
    unsigned max_threads = 0;
    int line = 0;
};

struct instance {
    std::string host_name, tmpl, args, file;
    int line;
};

struct state {
    std::vector<kernel_def> kernels;
    std::vector<instance> instances;
    int next_tg_id = 0;
    bool failed = false;
};

state g;

void fail(const std::string &file, int line, const std::string &msg)
{
    fprintf(stderr, "%s:%d: metal-pp: %s\n", file.c_str(), line, msg.c_str());
    g.failed = true;
}

std::string trim(const std::string &s)
{
    size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

/* Split "a, b(c, d), e" at top-level commas. */
std::vector<std::string> split_top(const std::string &s)
{
    std::vector<std::string> out;
    int depth = 0;
    std::string cur;
    for (char c : s) {
        if (c == '(' || c == '[' || c == '<' || c == '{') depth++;
        if (c == ')' || c == ']' || c == '>' || c == '}') depth--;
        if (c == ',' && depth == 0) {
            out.push_back(trim(cur));
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!trim(cur).empty()) out.push_back(trim(cur));
    return out;
}

bool is_standard_attr(const std::string &a)
{
    static const char *std_attrs[] = {"maybe_unused", "likely", "unlikely", "fallthrough", "nodiscard",
                                      "noreturn", "deprecated", "no_unique_address"};
    for (const char *s : std_attrs)
        if (a.compare(0, strlen(s), s) == 0) return true;
    return a.compare(0, 7, "clang::") == 0 || a.compare(0, 5, "gnu::") == 0;
}

/* ---------------------------------------------------------------------
 * Lexer: identifiers, numbers, strings, punctuation, whole preprocessor
 * lines; comments skipped; [[...]] collapsed into one ATTR token.
 * --------------------------------------------------------------------- */
std::vector<token> lex(const std::string &s, const std::string &file)
{
    std::vector<token> t;
    size_t i = 0, n = s.size();
    int line = 1;
    bool line_start = true;
    while (i < n) {
        char c = s[i];
        if (c == '\n') {
            line++;
            line_start = true;
            i++;
            continue;
        }
        if (isspace((unsigned char)c)) {
            i++;
            continue;
        }
        if (c == '/' && i + 1 < n && s[i + 1] == '/') {
            while (i < n && s[i] != '\n') i++;
            continue;
        }
        if (c == '/' && i + 1 < n && s[i + 1] == '*') {
            size_t j = s.find("*/", i + 2);
            j = j == std::string::npos ? n : j + 2;
            for (size_t k = i; k < j; k++) line += s[k] == '\n';
            i = j;
            continue;
        }
        size_t b = i;
        int l0 = line;
        if (c == '#' && line_start) {
            while (i < n && s[i] != '\n') {
                if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\n') {
                    line++;
                    i++;
                }
                i++;
            }
            t.push_back({PP, b, i, l0, s.substr(b, i - b), {}});
            continue;
        }
        line_start = false;
        if (isalpha((unsigned char)c) || c == '_') {
            while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_')) i++;
            t.push_back({IDENT, b, i, l0, s.substr(b, i - b), {}});
        } else if (isdigit((unsigned char)c) || (c == '.' && i + 1 < n && isdigit((unsigned char)s[i + 1]))) {
            while (i < n) {
                char d = s[i];
                if ((d == '+' || d == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E' || s[i - 1] == 'p' ||
                                               s[i - 1] == 'P')) {
                    i++;
                    continue;
                }
                if (!(isalnum((unsigned char)d) || d == '.' || d == '_' || d == '\'')) break;
                i++;
            }
            t.push_back({NUMBER, b, i, l0, s.substr(b, i - b), {}});
        } else if (c == '"' || c == '\'') {
            i++;
            while (i < n && s[i] != c) i += s[i] == '\\' ? 2 : 1;
            i++;
            t.push_back({STRING, b, i, l0, s.substr(b, i - b), {}});
        } else if (c == '[' && i + 1 < n && s[i + 1] == '[') {
            /* [[ attribute-list ]] */
            size_t j = i + 2;
            int depth = 0;
            while (j < n && !(depth == 0 && s[j] == ']' && j + 1 < n && s[j + 1] == ']')) {
                if (s[j] == '(' || s[j] == '[') depth++;
                if (s[j] == ')' || s[j] == ']') depth--;
                if (s[j] == '\n') line++;
                j++;
            }
            if (j >= n) {
                fail(file, l0, "unterminated [[");
                return t;
            }
            token a{ATTR, b, j + 2, l0, s.substr(b, j + 2 - b), {}};
            a.attrs = split_top(s.substr(i + 2, j - i - 2));
            a.standard = true;
            for (auto &x : a.attrs) a.standard = a.standard && is_standard_attr(x);
            t.push_back(a);
            i = j + 2;
        } else {
            static const char *two[] = {"::", "->", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||",
                                        "+=", "-=", "*=", "/=", "++", "--", "%=", "&=", "|=", "^="};
            size_t len = 1;
            for (const char *p : two)
                if (i + 1 < n && s[i] == p[0] && s[i + 1] == p[1]) len = 2;
            /* ">>" may close two template argument lists: keep '>' single */
            if (s[i] == '>' && len == 2 && s[i + 1] == '>') len = 1;
            i += len;
            t.push_back({PUNCT, b, i, l0, s.substr(b, len), {}});
        }
    }
    return t;
}

/* ---------------------------------------------------------------------
 * Kernel signatures
 * --------------------------------------------------------------------- */
const std::map<std::string, std::string> attr_ids = {
    {"thread_position_in_grid", "A_THREAD_POSITION_IN_GRID"},
    {"thread_position_in_threadgroup", "A_THREAD_POSITION_IN_THREADGROUP"},
    {"threadgroup_position_in_grid", "A_THREADGROUP_POSITION_IN_GRID"},
    {"threads_per_threadgroup", "A_THREADS_PER_THREADGROUP"},
    {"threadgroups_per_grid", "A_THREADGROUPS_PER_GRID"},
    {"threads_per_grid", "A_THREADS_PER_GRID"},
    {"thread_index_in_threadgroup", "A_THREAD_INDEX_IN_THREADGROUP"},
    {"thread_index_in_simdgroup", "A_THREAD_INDEX_IN_SIMDGROUP"},
    {"simdgroup_index_in_threadgroup", "A_SIMDGROUP_INDEX_IN_THREADGROUP"},
    {"simdgroups_per_threadgroup", "A_SIMDGROUPS_PER_THREADGROUP"},
    {"threads_per_simdgroup", "A_THREADS_PER_SIMDGROUP"},
    {"thread_execution_width", "A_THREADS_PER_SIMDGROUP"},
    {"thread_index_in_quadgroup", "A_THREAD_INDEX_IN_QUADGROUP"},
    {"quadgroup_index_in_threadgroup", "A_QUADGROUP_INDEX_IN_THREADGROUP"},
    {"dispatch_threads_per_threadgroup", "A_DISPATCH_THREADS_PER_THREADGROUP"},
};

/* "buffer(3)" -> "buffer", 3 */
bool attr_call(const std::string &a, std::string *name, long *arg)
{
    size_t p = a.find('(');
    *name = trim(a.substr(0, p));
    *arg = -1;
    if (p == std::string::npos) return true;
    std::string in = trim(a.substr(p + 1, a.rfind(')') - p - 1));
    char *end;
    *arg = strtol(in.c_str(), &end, 0);
    return *end == 0;
}

std::string host_name_of(const std::string &a)
{
    size_t q = a.find('"'), r = a.rfind('"');
    return q == std::string::npos || r == q ? "" : a.substr(q + 1, r - q - 1);
}

/* One top-level statement [b, e) that mentions `kernel`. */
void parse_kernel(const std::vector<token> &t, size_t b, size_t e, const std::string &file)
{
    bool is_template = false, is_instance = false;
    size_t i = b;
    std::string host;
    unsigned max_threads = 0;
    int line = t[b].line;
    if (t[i].kind == IDENT && t[i].text == "template") {
        i++;
        if (i < e && t[i].text == "<") {
            is_template = true;
            int d = 0;
            for (; i < e; i++) {
                if (t[i].text == "<") d++;
                if (t[i].text == ">" && --d == 0) break;
            }
            i++;
        } else {
            is_instance = true;
        }
    }
    /* attributes and keywords before the return type */
    std::vector<size_t> head;
    for (; i < e; i++) {
        if (t[i].kind == ATTR) {
            for (auto &a : t[i].attrs) {
                std::string nm;
                long arg;
                attr_call(a, &nm, &arg);
                if (nm == "host_name") host = host_name_of(a);
                else if (nm == "max_total_threads_per_threadgroup") max_threads = (unsigned)arg;
                else if (nm != "kernel" && !is_standard_attr(nm))
                    fail(file, t[i].line, "unsupported kernel attribute [[" + a + "]]");
            }
            continue;
        }
        if (t[i].kind == IDENT && (t[i].text == "kernel" || t[i].text == "inline" || t[i].text == "static"))
            continue;
        break;
    }
    /* type and name: up to '(' or ';' at angle depth 0 */
    size_t name_at = 0, lt = 0, open = 0;
    int d = 0;
    for (; i < e; i++) {
        const std::string &x = t[i].text;
        if (x == "<") {
            if (d == 0 && !lt) lt = i;
            d++;
        } else if (x == ">") {
            d--;
        } else if (d == 0 && (x == "(" || x == ";" || x == "{")) {
            break;
        } else if (d == 0 && t[i].kind == IDENT && !lt) {
            name_at = i;
        }
    }
    if (!name_at) {
        fail(file, line, "cannot find the kernel's name");
        return;
    }
    open = i;
    std::string name = t[name_at].text, args;
    if (lt) {
        size_t gt = lt;
        d = 0;
        for (; gt < open; gt++) {
            if (t[gt].text == "<") d++;
            if (t[gt].text == ">" && --d == 0) break;
        }
        for (size_t k = lt; k <= gt && k < open; k++) args += (k > lt && k < gt ? " " : "") + t[k].text;
    }
    if (is_instance) {
        if (host.empty()) {
            fail(file, line, "template instantiation of kernel '" + name + "' without [[host_name(\"...\")]]");
            return;
        }
        if (args.empty()) {
            fail(file, line, "write the template arguments of '" + name + "' explicitly (" + name + "<...>)");
            return;
        }
        g.instances.push_back({host, name, args, file, line});
        return;
    }
    if (open >= e || t[open].text != "(") {
        fail(file, line, "kernel '" + name + "': expected a parameter list");
        return;
    }
    kernel_def k;
    k.name = name;
    k.host_name = host.empty() ? name : host;
    k.is_template = is_template;
    k.file = file;
    k.max_threads = max_threads;
    k.line = line;
    /* parameters: split at depth-0 commas up to the matching ')' */
    size_t p = open + 1;
    d = 0;
    std::vector<size_t> cur;
    auto finish = [&]() {
        if (cur.empty()) return;
        param pr;
        std::string slot;
        for (size_t k2 : cur) {
            if (t[k2].kind == IDENT) pr.name = t[k2].text;
            if (t[k2].kind != ATTR) continue;
            for (auto &a : t[k2].attrs) {
                std::string nm;
                long arg;
                if (!attr_call(a, &nm, &arg)) {
                    fail(file, t[k2].line, "cannot read [[" + a + "]]");
                    continue;
                }
                if (nm == "buffer" && arg >= 0 && arg < 31)
                    slot = "::emu_rt::SLOT_BUFFER, 0, " + std::to_string(arg);
                else if (nm == "threadgroup" && arg >= 0 && arg < 31)
                    slot = "::emu_rt::SLOT_THREADGROUP, 0, " + std::to_string(arg);
                else if (attr_ids.count(nm))
                    slot = "::emu_rt::SLOT_ATTR, ::emu_rt::" + attr_ids.at(nm) + ", 0";
                else
                    fail(file, t[k2].line, "kernel '" + name + "': unsupported parameter attribute [[" + a + "]]");
            }
        }
        if (slot.empty())
            fail(file, t[cur[0]].line, "kernel '" + name + "': parameter '" + pr.name + "' has no attribute");
        pr.slot = "{" + slot + ", \"" + pr.name + "\"}";
        k.params.push_back(pr);
        cur.clear();
    };
    for (; p < e; p++) {
        const std::string &x = t[p].text;
        if (t[p].kind == PUNCT && (x == "(" || x == "<" || x == "[")) d++;
        if (t[p].kind == PUNCT && (x == ")" || x == ">" || x == "]")) {
            if (d == 0) break;
            d--;
        }
        if (d == 0 && x == ",") {
            finish();
            continue;
        }
        cur.push_back(p);
    }
    finish();
    if (p + 1 < e && t[p + 1].text == ";") {
        /* a declaration only: the definition registers it */
        return;
    }
    g.kernels.push_back(k);
}

/* ---------------------------------------------------------------------
 * One file: edits and kernel discovery
 * --------------------------------------------------------------------- */
std::string read_file(const std::string &path, bool *ok)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    *ok = f.good() || f.eof();
    if (!f.is_open()) *ok = false;
    return ss.str();
}

std::string quote(const std::string &s)
{
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        o += c;
    }
    return o + "\"";
}

std::string process(const std::string &path, int depth);

std::string apply_edits(const std::string &src, std::vector<edit> &edits)
{
    std::string out;
    size_t at = 0;
    std::stable_sort(edits.begin(), edits.end(), [](const edit &a, const edit &b) { return a.b < b.b; });
    for (auto &ed : edits) {
        if (ed.b < at) continue; /* overlapping: first wins */
        out += src.substr(at, ed.b - at);
        out += ed.text;
        for (size_t k = ed.b; k < ed.e; k++)
            if (src[k] == '\n') out += '\n';
        at = ed.e;
    }
    return out + src.substr(at);
}

std::string process(const std::string &path, int depth)
{
    bool ok;
    std::string src = read_file(path, &ok);
    if (!ok) {
        fprintf(stderr, "metal-pp: %s: cannot read\n", path.c_str());
        g.failed = true;
        return "";
    }
    std::vector<token> t = lex(src, path);
    std::vector<edit> ed;
    int brace = 0;
    size_t stmt = 0; /* first token of the current top-level statement */
    bool stmt_kernel = false;

    for (size_t i = 0; i < t.size(); i++) {
        token &k = t[i];
        const std::string &x = k.text;
        const std::string prev = i ? t[i - 1].text : ";";
        switch (k.kind) {
        case PP: {
            /* #include "x.metal": inline it, pre-passed */
            size_t q = x.find('"');
            if (x.find("include") != std::string::npos && q != std::string::npos) {
                std::string inc = x.substr(q + 1, x.find('"', q + 1) - q - 1);
                if (inc.size() > 6 && inc.compare(inc.size() - 6, 6, ".metal") == 0) {
                    std::string dir = path.substr(0, path.rfind('/') + 1);
                    if (depth > 16) {
                        fail(path, k.line, "#include nesting too deep");
                        break;
                    }
                    std::string body = process(dir + inc, depth + 1);
                    ed.push_back({k.b, k.e,
                                  "#line 1 " + quote(dir + inc) + "\n" + body + "\n#line " +
                                      std::to_string(k.line + 1) + " " + quote(path)});
                }
            }
            break;
        }
        case ATTR:
            if (!k.standard) {
                for (auto &a : k.attrs) {
                    std::string nm;
                    long arg;
                    attr_call(a, &nm, &arg);
                    if (nm == "kernel" || nm == "host_name") stmt_kernel = true;
                    if (nm == "function_constant")
                        fail(path, k.line, "function constants are not supported by the emulator");
                }
                ed.push_back({k.b, k.e, ""});
            }
            break;
        case NUMBER: {
            bool hex = x.size() > 1 && x[0] == '0' && (x[1] == 'x' || x[1] == 'X');
            bool fl = hex ? x.find_first_of("pP") != std::string::npos
                          : x.find_first_of(".eE") != std::string::npos;
            char last = x.back();
            if (!hex && (last == 'h' || last == 'H'))
                ed.push_back({k.b, k.e, "((half)" + x.substr(0, x.size() - 1) + (fl ? "f" : "") + ")"});
            else if (fl && (isdigit((unsigned char)last) || last == '.'))
                ed.push_back({k.b, k.e, x + "f"});
            break;
        }
        case IDENT:
            if (x == "kernel") {
                if (brace != 0) fail(path, k.line, "kernels must be at file scope (not in a namespace or struct)");
                stmt_kernel = true;
                ed.push_back({k.b, k.e, ""});
            } else if (x == "vertex" || x == "fragment") {
                fail(path, k.line, "only compute kernels are supported");
            } else if (x == "device" || x == "thread" || x == "threadgroup_imageblock") {
                ed.push_back({k.b, k.e, ""});
            } else if (x == "constant") {
                bool near_const = prev == "const" || (i + 1 < t.size() && t[i + 1].text == "const");
                ed.push_back({k.b, k.e, near_const ? "" : "const"});
            } else if (x == "threadgroup") {
                bool at_stmt = prev == ";" || prev == "{" || prev == "}" || prev == ":" || t[i - 1].kind == PP;
                /* storage: threadgroup T name[dims]; (no *, &, =, ( before the first '[') */
                size_t j = i + 1, name = 0;
                bool storage = at_stmt && brace > 0;
                int d = 0;
                for (; j < t.size() && !(d == 0 && t[j].text == ";"); j++) {
                    const std::string &y = t[j].text;
                    if (y == "<" || y == "(" || y == "[") {
                        if (d == 0 && y == "[") break;
                        d++;
                    }
                    if (y == ">" || y == ")" || y == "]") d--;
                    if (d == 0 && (y == "*" || y == "&" || y == "=" || y == "(")) storage = false;
                    if (d == 0 && y == ",") {
                        if (storage) fail(path, t[j].line, "declare one threadgroup variable per statement");
                        storage = false;
                    }
                    if (d == 0 && t[j].kind == IDENT) name = j;
                }
                if (storage && name && name > i + 1) {
                    size_t semi = j;
                    d = 0;
                    for (; semi < t.size() && !(d == 0 && t[semi].text == ";"); semi++) {
                        if (t[semi].text == "[") d++;
                        if (t[semi].text == "]") d--;
                    }
                    ed.push_back({k.b, k.e, "auto &" + t[name].text + " = ::emu_rt::tg_var<"});
                    ed.push_back({t[name].b, t[name].e, ""});
                    if (semi < t.size())
                        ed.push_back({t[semi].b, t[semi].b, ", " + std::to_string(g.next_tg_id++) + ">()"});
                } else {
                    ed.push_back({k.b, k.e, ""});
                }
            }
            break;
        case PUNCT:
            if (x == "{") {
                brace++;
            } else if (x == "}") {
                brace--;
                if (brace == 0) {
                    if (stmt_kernel) parse_kernel(t, stmt, i + 1, path);
                    stmt_kernel = false;
                    stmt = i + 1;
                    /* a struct/class definition continues to its ';' */
                    if (i + 1 < t.size() && t[i + 1].text == ";") stmt = i + 2;
                }
            } else if (x == ";" && brace == 0) {
                if (stmt_kernel) parse_kernel(t, stmt, i + 1, path);
                stmt_kernel = false;
                stmt = i + 1;
            }
            break;
        default:
            break;
        }
        if (k.kind == PP && brace == 0 && stmt == i) stmt = i + 1;
    }
    return apply_edits(src, ed);
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: metal-pp IN.metal OUT.cpp\n");
        return 2;
    }
    std::string in = argv[1];
    std::string body = process(in, 0);
    std::ostringstream o;
    o << "/* generated by tests/metal-emu/metal-pp from " << in << "; do not edit */\n"
      << "#include \"metal_emu_rt.h\"\n"
      << "#line 1 " << quote(in) << "\n"
      << body << "\n\n/* ---- metal-pp: kernel registrations ---- */\nnamespace {\n";
    std::map<std::string, const kernel_def *> by_name;
    std::map<std::string, int> hosts;
    int n = 0;
    auto emit = [&](const kernel_def &k, const std::string &host, const std::string &fn) {
        if (hosts[host]++) {
            fprintf(stderr, "%s: metal-pp: two kernels named '%s'\n", in.c_str(), host.c_str());
            g.failed = true;
        }
        std::string slots = "emu_slots_" + std::to_string(n);
        o << "const ::emu_rt::slot " << slots << "[] = {";
        for (auto &p : k.params) o << "\n    " << p.slot << ",";
        if (k.params.empty()) o << "{0, 0, 0, nullptr}";
        o << "\n};\n::emu_rt::registrar emu_reg_" << n << "(" << quote(host) << ", " << quote(k.file) << ", &" << fn
          << ", " << slots << ", " << k.params.size() << ", " << k.max_threads << "u);\n";
        n++;
    };
    for (auto &k : g.kernels) {
        by_name[k.name] = &k;
        if (!k.is_template) emit(k, k.host_name, k.name);
    }
    for (auto &ins : g.instances) {
        auto it = by_name.find(ins.tmpl);
        if (it == by_name.end()) {
            fail(ins.file, ins.line, "instantiation of '" + ins.tmpl + "': no template kernel of that name");
            continue;
        }
        emit(*it->second, ins.host_name, ins.tmpl + ins.args);
    }
    o << "} // namespace\n";
    if (g.failed) return 1;
    std::string out = argv[2], tmp = out + ".tmp";
    FILE *f = fopen(tmp.c_str(), "w");
    if (!f || fputs(o.str().c_str(), f) < 0 || fclose(f) != 0 || rename(tmp.c_str(), out.c_str()) != 0) {
        fprintf(stderr, "metal-pp: %s: cannot write\n", out.c_str());
        return 1;
    }
    return 0;
}
