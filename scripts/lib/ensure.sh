# Shared by scripts/run and scripts/test: make sure what the shop needs is installed,
# installing it through the system package manager when we can, or saying exactly how.

say() { printf 'shop: %s\n' "$*" >&2; }

# apt-get install, as root directly or through passwordless sudo; otherwise print the
# command for the user to run and fail.
apt_install() {
    local packages=("$@")
    if ! command -v apt-get >/dev/null 2>&1; then
        say "missing: ${packages[*]}. Install them with your system's package manager."
        exit 1
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo="sudo"
        else
            say "missing: ${packages[*]}. Install them with:"
            say "    sudo apt-get update && sudo apt-get install -y ${packages[*]}"
            exit 1
        fi
    fi
    say "installing ${packages[*]} (apt-get)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${packages[@]}" >/dev/null
}

ensure_cargo() {
    if ! command -v cargo >/dev/null 2>&1; then
        say "cargo (Rust) is not installed. Install it with rustup:"
        say "    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh"
        exit 1
    fi
}

ensure_redis_server() {
    local bin="${SHOP_REDIS_SERVER:-redis-server}"
    if command -v "$bin" >/dev/null 2>&1; then
        return
    fi
    if [ -n "${SHOP_REDIS_SERVER:-}" ]; then
        say "SHOP_REDIS_SERVER=$SHOP_REDIS_SERVER is not an executable"
        exit 1
    fi
    apt_install redis-server
    command -v redis-server >/dev/null 2>&1 || { say "redis-server still missing"; exit 1; }
}

# PostgreSQL tests create their own database on the server at SHOP_TEST_POSTGRES_URL
# (default postgres://postgres@127.0.0.1:5432/postgres). Start a local cluster that
# is installed but stopped; otherwise say that those tests will skip (under CI=true
# they fail instead).
ensure_postgres() {
    if [ -n "${SHOP_TEST_POSTGRES_URL:-}" ] || ! command -v pg_isready >/dev/null 2>&1; then
        command -v pg_isready >/dev/null 2>&1 || say "no PostgreSQL client tools: PostgreSQL tests will skip (fail under CI=true). Debian: apt-get install postgresql"
        return
    fi
    if pg_isready -q -h 127.0.0.1 -p 5432; then
        return
    fi
    if [ "$(id -u)" -eq 0 ] && command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
        say "starting the local PostgreSQL cluster"
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
        for _ in $(seq 1 20); do pg_isready -q -h 127.0.0.1 -p 5432 && return; sleep 0.5; done
    fi
    say "PostgreSQL is not answering on 127.0.0.1:5432: PostgreSQL tests will skip (fail under CI=true)."
}

# The browser test drives Debian's Chromium through chromedriver.
ensure_browser() {
    if command -v chromedriver >/dev/null 2>&1 && [ -x /usr/bin/chromium ]; then
        return
    fi
    apt_install chromium chromium-driver
}

# The edge tests and `scripts/run --edge` run Varnish 7 with the xkey vmod.
ensure_varnish() {
    if command -v varnishd >/dev/null 2>&1 || [ -x /usr/sbin/varnishd ]; then
        if ls /usr/lib/*/varnish/vmods/libvmod_xkey.so >/dev/null 2>&1; then
            return
        fi
    fi
    apt_install varnish varnish-modules
}

# npm install -g, as root directly; otherwise print the command and fail.
npm_install_global() {
    if ! command -v npm >/dev/null 2>&1; then
        apt_install nodejs npm
    fi
    if [ "$(id -u)" -ne 0 ] && [ ! -w "$(npm root -g)" ]; then
        say "missing: $*. Install them with:"
        say "    sudo npm install -g $*"
        exit 1
    fi
    say "installing $* (npm install -g)"
    npm install -g --no-fund --no-audit --loglevel=error "$@" >/dev/null
}

# scripts/audit-pages: headless Chromium (Debian's), Lighthouse 12 and the Nu Html
# Checker (vnu-jar, which runs on Java).
ensure_chromium() {
    command -v chromium >/dev/null 2>&1 || apt_install chromium
}

ensure_lighthouse() {
    local version
    version="$(lighthouse --version 2>/dev/null || true)"
    if [ "${version%%.*}" != 12 ]; then
        npm_install_global lighthouse@12
    fi
    command -v lighthouse >/dev/null 2>&1 || { say "lighthouse still missing"; exit 1; }
}

# Sets VNU_JAR (the path of vnu.jar) unless it is set already.
ensure_vnu() {
    command -v java >/dev/null 2>&1 || apt_install default-jre-headless
    if [ -n "${VNU_JAR:-}" ]; then
        [ -f "$VNU_JAR" ] || { say "VNU_JAR=$VNU_JAR is not a file"; exit 1; }
        return
    fi
    if ! command -v npm >/dev/null 2>&1 || [ ! -f "$(npm root -g)/vnu-jar/build/dist/vnu.jar" ]; then
        npm_install_global vnu-jar
    fi
    VNU_JAR="$(npm root -g)/vnu-jar/build/dist/vnu.jar"
    [ -f "$VNU_JAR" ] || { say "vnu.jar still missing"; exit 1; }
}
