# script-help: sourced first by the tools/*.sh scripts that take no options. "-h" or "--help" as
# the first argument prints the calling script's leading comment block, its manual, and exits 0,
# so asking for help never starts the script's work (an install, a build into a directory named
# "--help", a test run) as an unknown argument otherwise would.
case "${1:-}" in
-h | --help)
    awk 'NR == 1 && /^#!/ { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"
    exit 0
    ;;
esac
