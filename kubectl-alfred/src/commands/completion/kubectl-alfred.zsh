#compdef kubectl-alfred
# zsh completion for kubectl-alfred. Load it with: source <(kubectl-alfred completion zsh)
_kubectl_alfred() {
    local out directive line
    local -a lines candidates
    out=$(kubectl-alfred __complete "${(@)words[2,CURRENT]}" 2>/dev/null) || return
    lines=("${(@f)out}")
    directive=${lines[-1]#:}
    for line in "${(@)lines[1,-2]}"; do
        [[ -n $line ]] && candidates+=("${line%%$'\t'*}")
    done
    if ((${#candidates})); then
        compadd -- "${candidates[@]}"
    elif (((directive & 4) == 0)); then
        _files
    fi
}
compdef _kubectl_alfred kubectl-alfred
