module github.com/allotmesh/allot/deploy

go 1.26.0

replace github.com/allotmesh/allot => ../
